package e2e

import (
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluicemesh/sluice/test/harness/kubetest"
	"github.com/sluicemesh/sluice/test/harness/nstest"
	"github.com/sluicemesh/sluice/test/harness/podtest"
	"github.com/sluicemesh/sluice/test/harness/proctest"
)

// "The netns replaced under the same pod": another netns is mounted at a
// running mesh pod's netns path while the pod's process still holds its
// own. Within 10 s the agent counts it, writes nothing to the new netns,
// and keeps verifying the pod's own (found through /proc): a flush of its
// ruleset there is still restored within 10 s, seen as a real connection
// landing on the proxy.
func TestNetnsReplacedUnderARunningPod(t *testing.T) {
	n := newNode(t)
	n.startAgent("--netns-roots", n.Root+",/proc", "--host-proc", "/proc")
	c := n.cni(n.conflist("1.1.0", ""))
	pod := n.Pod("replaced")
	if _, err := c.Add(rt("c0ffee36", pod)); err != nil {
		t.Fatalf("ADD: %v", err)
	}
	p := startProxy(t, pod, "15001")
	own := podProcess(t, pod) // the pod's own netns, as its process sees it

	replaceNetns(t, pod)
	replaced := time.Now()
	want := `sluice_netns_replaced_total{outcome="followed"} 1`
	var last string
	nstest.Eventually(t, 10*time.Second, func() bool {
		_, body, err := n.HTTPGet("http://127.0.0.1:9890/metrics")
		last = grepLines(body, "netns_replaced")
		return err == nil && strings.Contains(body, want)
	}, "/metrics lacks %q within 10 s of the replacement: %s", want, lastSeen(func() any { return last }))
	t.Logf("replacement counted after %v", time.Since(replaced).Round(time.Millisecond))
	if noTable(t, pod) != "" {
		t.Fatalf("the netns mounted at the pod's path got a sluice table")
	}
	if s := rulesetState(t, own); s != "full" {
		t.Fatalf("the pod's own netns after the replacement: %s", s)
	}

	own.Run(t, "nft", "flush", "ruleset")
	lost := time.Now()
	nstest.Eventually(t, 10*time.Second, func() bool { return rulesetState(t, own) == "full" },
		"the followed netns's flushed ruleset not restored within 10 s")
	t.Logf("flush of the pod's own netns restored after %v", time.Since(lost).Round(time.Millisecond))
	if _, err := dialFrom(t, own, "10.96.0.10:80"); err != nil {
		t.Fatalf("outbound from the pod's own netns after the restore: %v", err)
	}
	p.expect(t, "10.96.0.10:80")
	restoredAtLeast(t, n, "ruleset", 1)
	if out := noTable(t, pod); out != "" {
		t.Fatalf("the netns mounted at the pod's path got a sluice table after the restore:\n%s", out)
	}
	if _, body, err := n.HTTPGet("http://127.0.0.1:9890/metrics"); err != nil || !strings.Contains(body, want) {
		t.Errorf("counted more than once (%v): %s", err, grepLines(body, "netns_replaced"))
	}
}

// In Kubernetes mode the pod gets a NetnsReplaced Warning Event naming the
// path and what the agent did, within 10 s, from the default intervals.
func TestNetnsReplacedEventOnPod(t *testing.T) {
	env, c := sharedKube(t)
	createNamespace(t, c, "swapped")
	n := newNode(t)
	n.kubeAgent(env, "--netns-roots", n.Root+",/proc", "--host-proc", "/proc")
	cni := n.cni(n.loopbackChain("5s"))
	pod := podtest.Create(t, c, "swapped", sidecarPod("cart", nil))
	sandbox := n.Pod("cart")
	if _, err := cni.Add(rtFor("swapped1", sandbox, pod)); err != nil {
		t.Fatalf("ADD: %v", err)
	}
	own := podProcess(t, sandbox)

	replaceNetns(t, sandbox)
	ev := kubetest.WaitPodEvent(t, c, pod, "NetnsReplaced")
	if ev.Type != "Warning" || !strings.Contains(ev.Message, sandbox.Path) || !strings.Contains(ev.Message, "wrote nothing") {
		t.Errorf("NetnsReplaced event %s %q: want a Warning naming %s and that nothing was written", ev.Type, ev.Message, sandbox.Path)
	}
	if out := noTable(t, sandbox); out != "" {
		t.Fatalf("the netns mounted at the pod's path got a sluice table:\n%s", out)
	}
	if noTable(t, own) == "" {
		t.Error("the pod's own netns lost its sluice table")
	}
	n.expectInSync(t, "swapped1") // verified where the pod's own netns is now
}

// podProcess starts a process in pod's netns, as a pod's pause process
// holds it, and returns that netns by the process's /proc path; the
// process is killed and reaped at the end.
func podProcess(t *testing.T, pod *nstest.NS) *nstest.NS {
	t.Helper()
	return &nstest.NS{Name: pod.Name + "-own", Path: proctest.InNetns(t, pod.Path).Netns()}
}

// replaceNetns mounts a fresh netns over pod's path, hiding the pod's own
// mount, as `mount --bind` onto a runtime's netns file does; the fresh
// netns lives outside the agent's roots and is removed at the end.
func replaceNetns(t *testing.T, pod *nstest.NS) {
	t.Helper()
	other := nstest.New(t, pod.Name+"-intruder")
	if err := unix.Mount(other.Path, pod.Path, "none", unix.MS_BIND, ""); err != nil {
		t.Fatalf("mount %s over %s: %v", other.Path, pod.Path, err)
	}
	t.Cleanup(func() { unix.Unmount(pod.Path, unix.MNT_DETACH) })
	if !sameFile(pod.Path, other.Path) {
		t.Fatalf("%s does not name the new netns", pod.Path)
	}
}

// noTable is "" when the netns at ns.Path holds no sluice table, else the
// table.
func noTable(t *testing.T, ns *nstest.NS) string {
	t.Helper()
	out, err := ns.Command("nft", "list", "table", "inet", "sluice").CombinedOutput()
	if err != nil {
		return ""
	}
	return string(out)
}

func sameFile(a, b string) bool {
	sa, err := os.Stat(a)
	if err != nil {
		return false
	}
	sb, err := os.Stat(b)
	return err == nil && os.SameFile(sa, sb)
}
