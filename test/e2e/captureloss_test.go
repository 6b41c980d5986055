package e2e

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	sluicev1 "github.com/sluicemesh/sluice/api/sluice/v1"
	"github.com/sluicemesh/sluice/test/harness/kubetest"
	"github.com/sluicemesh/sluice/test/harness/nstest"
	"github.com/sluicemesh/sluice/test/harness/podtest"
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
		// The agent counts a reassert once its apply is journaled, a moment
		// after the table is back.
		want := fmt.Sprintf("sluice_ruleset_reasserts_total %d", i+1)
		nstest.Eventually(t, 2*time.Second, func() bool {
			_, body, err := n.HTTPGet("http://127.0.0.1:9890/metrics")
			return err == nil && strings.Contains(body, want)
		}, "%s: /metrics lacks %q", f.name, want)
	}
	// Each fault lost rules of the pod's table: counted by what was lost.
	want := `sluice_capture_restored_total{what="ruleset"} 3`
	if _, body, err := n.HTTPGet("http://127.0.0.1:9890/metrics"); err != nil || !strings.Contains(body, want) {
		t.Errorf("/metrics lacks %q (%v):\n%s", want, err, grepLines(body, "capture_restored"))
	}
}

// grepLines is body's lines that contain s.
func grepLines(body, s string) string {
	var out []string
	for _, l := range strings.Split(body, "\n") {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// restoredAtLeast waits for sluice_capture_restored_total{what} to reach min.
func restoredAtLeast(t *testing.T, n *node, what string, min int) {
	t.Helper()
	re := regexp.MustCompile(`sluice_capture_restored_total\{what="` + what + `"\} (\d+)`)
	var last string
	nstest.Eventually(t, 2*time.Second, func() bool {
		_, body, err := n.HTTPGet("http://127.0.0.1:9890/metrics")
		if err != nil {
			return false
		}
		m := re.FindStringSubmatch(body)
		if m == nil {
			last = grepLines(body, "capture_restored")
			return false
		}
		last = m[0]
		v, _ := strconv.Atoi(m[1])
		return v >= min
	}, "restored %s: want at least %d, /metrics says %s", what, min, lastSeen(func() any { return last }))
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
	pod := podtest.Create(t, c, "lossy", sidecarPod("cart", nil))
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

// An ambient pod loses its in-pod rules, its policy routes, and the node
// loses the host probe table: with default intervals each is back within
// 10 s, seen as a real connection reaching the proxy port and the pod's IP
// back in the probe set.
func TestAmbientCaptureLossRestoredWithinTenSeconds(t *testing.T) {
	n := newNode(t)
	zsock := filepath.Join(t.TempDir(), "ztunnel", "ztunnel.sock")
	n.startAgent("--ambient", "--default-mode", "ambient", "--host-netns", n.NS.Path, "--ztunnel-socket", zsock)
	z := connectZDS(t, zsock)
	if req, _ := z.next(); req.GetSnapshotSent() == nil {
		t.Fatalf("first message %v, want an empty snapshot", req)
	}
	c := n.cni(n.conflist("1.1.0", ""))
	pod := n.Pod("amb-loss")
	added := make(chan error, 1)
	go func() { _, err := c.Add(rt("ambloss1", pod)); added <- err }()
	if req, _ := z.next(); req.GetAdd() == nil {
		t.Fatalf("ztunnel got %v, want Add", req)
	}
	if err := <-added; err != nil {
		t.Fatalf("ADD: %v", err)
	}
	n.expectInSync(t, "ambloss1")
	p := startProxy(t, pod, "15001")
	var lastDrift any
	debug := sluicev1.NewDebugClient(n.Client()) // one connection: each costs one of the socket's slots
	inSync := func() bool {
		w, err := debug.GetWorkload(t.Context(), &sluicev1.GetWorkloadRequest{ContainerId: "ambloss1"})
		if err != nil {
			lastDrift = err
			return false
		}
		out, _ := pod.Command("nft", "list", "tables").CombinedOutput()
		host, _ := n.NS.Command("nft", "list", "tables").CombinedOutput()
		lastDrift = fmt.Sprint(w.Drift, " tables: ", string(out), " host tables: ", string(host))
		return len(w.Drift) == 0
	}
	probeSet := func() bool {
		out, err := n.NS.Command("nft", "list", "set", "inet", "sluice-host", "probe-pods-v4").CombinedOutput()
		return err == nil && strings.Contains(string(out), "10.244.0.")
	}
	faults := []struct {
		name     string
		inject   func()
		restored func() bool
	}{
		{"flush ruleset", func() { pod.Run(t, "nft", "flush", "ruleset") }, inSync},
		{"flush policy routes", func() { pod.Run(t, "ip", "-4", "route", "flush", "table", "100") }, inSync},
		{"delete host probe table", func() { n.NS.Run(t, "nft", "delete", "table", "inet", "sluice-host") }, probeSet},
		// Both at once: before, a pass stopped at the missing host table
		// and never reached the pod's own rules.
		{"flush the node's and the pod's rulesets", func() {
			n.NS.Run(t, "nft", "flush", "ruleset")
			pod.Run(t, "nft", "flush", "ruleset")
		}, func() bool { return inSync() && probeSet() }},
	}
	for _, f := range faults {
		f.inject()
		if f.restored() {
			t.Fatalf("%s: fault changed nothing the agent checks", f.name)
		}
		lost := time.Now()
		nstest.Eventually(t, 10*time.Second, f.restored, "%s: not restored within 10 s (last drift %v)", f.name, lastSeen(func() any { return lastDrift }))
		t.Logf("%s: restored after %v", f.name, time.Since(lost).Round(time.Millisecond))
		if _, err := dialFrom(t, pod, "10.96.0.10:80"); err != nil {
			t.Fatalf("%s: outbound after restore: %v", f.name, err)
		}
		p.expect(t, "10.96.0.10:80")
	}
	// Counted by what was lost: the pod's rules (twice), its policy routes,
	// the node's probe table (twice).
	restoredAtLeast(t, n, "ruleset", 2)
	restoredAtLeast(t, n, "routes", 1)
	restoredAtLeast(t, n, "host_probe_table", 2)
}

// lastSeen prints what its func returns when the message is formatted,
// after the wait, not when the wait began.
type lastSeen func() any

func (l lastSeen) String() string { return fmt.Sprint(l()) }
