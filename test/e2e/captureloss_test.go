package e2e

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sluicemesh/sluice/test/harness/kubetest"
	"github.com/sluicemesh/sluice/test/harness/nstest"
)

// A running pod's capture is lost in each way someone can lose it inside
// the pod's netns; with the agent's default flags it is back within 10 s,
// seen from the pod's side (a real connection lands on the proxy with its
// original destination), and counted in sluice_ruleset_reasserts_total.
func TestCaptureLossRestoredWithinTenSeconds(t *testing.T) {
	n := newNode(t)
	n.startAgent()
	c := n.cni(n.conflist("1.1.0", ""))
	pod := n.Pod("loss")
	if _, err := c.Add(rt("c0ffee35", pod)); err != nil {
		t.Fatalf("ADD: %v", err)
	}
	p := startProxy(t, pod, "15001")
	faults := []struct {
		name   string
		inject func()
	}{
		{"flush ruleset", func() { pod.Run(t, "nft", "flush", "ruleset") }},
		{"delete table", func() { pod.Run(t, "nft", "delete", "table", "inet", "sluice") }},
		{"delete one rule", func() { deleteRule(t, pod, "output", "outbound-tcp") }},
	}
	for i, f := range faults {
		f.inject()
		if s := rulesetState(t, pod); s == "full" {
			t.Fatalf("%s: fault left the ruleset whole", f.name)
		}
		lost := time.Now()
		nstest.Eventually(t, 10*time.Second, func() bool { return rulesetState(t, pod) == "full" },
			f.name+": capture not restored within 10 s")
		t.Logf("%s: restored after %v", f.name, time.Since(lost).Round(time.Millisecond))
		if _, err := dialFrom(t, pod, "10.96.0.10:80"); err != nil {
			t.Fatalf("%s: outbound after restore: %v", f.name, err)
		}
		p.expect(t, "10.96.0.10:80")
		_, body, err := n.HTTPGet("http://127.0.0.1:9890/metrics")
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("sluice_ruleset_reasserts_total %d", i+1); !strings.Contains(body, want) {
			t.Fatalf("%s: /metrics lacks %q", f.name, want)
		}
	}
}

// deleteRule deletes the rule with comment in chain of the pod's table.
func deleteRule(t *testing.T, pod *nstest.NS, chain, comment string) {
	t.Helper()
	out := pod.Run(t, "nft", "-a", "list", "chain", "inet", "sluice", chain)
	m := regexp.MustCompile(`comment "` + regexp.QuoteMeta(comment) + `" # handle (\d+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no rule %q in chain %s:\n%s", comment, chain, out)
	}
	pod.Run(t, "nft", "delete", "rule", "inet", "sluice", chain, "handle", m[1])
}

// In Kubernetes mode a running pod whose table is deleted gets a
// RulesetReasserted Event naming what was lost, within 10 s, from the
// agent's default flags.
func TestCaptureLossEventOnPod(t *testing.T) {
	env, c := sharedKube(t)
	createNamespace(t, c, "lossy")
	n := newNode(t)
	n.kubeAgent(env)
	cni := n.cni(n.loopbackChain("5s"))
	pod := createPod(t, c, "lossy", sidecarPod("cart", nil))
	sandbox := n.Pod("cart")
	if _, err := cni.Add(rtFor("lossy1", sandbox, pod)); err != nil {
		t.Fatalf("ADD: %v", err)
	}
	sandbox.Run(t, "nft", "delete", "table", "inet", "sluice")
	ev := kubetest.WaitPodEvent(t, c, pod, "RulesetReasserted")
	if !strings.Contains(ev.Message, "table") {
		t.Errorf("RulesetReasserted event %q does not name the lost table", ev.Message)
	}
	n.expectInSync(t, "lossy1")
}
