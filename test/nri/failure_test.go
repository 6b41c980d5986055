package nri_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicemesh/sluice/test/harness/nstest"
)

// ambientNoZtunnel makes every enrolment fail: the standalone ambient
// policy captures every pod, and no ztunnel is there to take it.
var ambientNoZtunnel = []string{"--ambient", "--default-mode", "ambient", "--ztunnel-socket", "/run/sluice/ztunnel.sock"}

// A pod the agent cannot capture fails runp, and containerd cleans it up:
// no sandbox, no netns, the pod's IP back in the pool, no record.
func TestNRIRejectionFailsRunp(t *testing.T) {
	n := newNode(t)
	c := n.startContainerd(containerdOptions{})
	a := n.startAgent(ambientNoZtunnel...)

	out, err := c.Crictl(t.Context(), "runp", c.podConfig("shop", "refused", nil))
	if err == nil {
		t.Fatalf("runp of a pod the agent cannot capture succeeded: %s", out)
	}
	if !strings.Contains(err.Error(), "sluice: capture pod shop/refused") {
		t.Fatalf("runp failed without the agent's reason: %v", err)
	}
	if pods := c.MustCrictl("pods", "-q"); pods != "" {
		t.Fatalf("sandboxes left after the rejected runp: %s", pods)
	}
	if ns, _ := os.ReadDir(n.Path("/run/netns")); len(ns) != 0 {
		t.Fatalf("netns left after the rejected runp: %v", ns)
	}
	if ws := n.Workloads(t); len(ws) != 0 {
		t.Fatalf("records left after the rejected runp: %v", ws)
	}
	nstest.Eventually(t, 5*time.Second, func() bool { return len(allocatedIPs(t, n)) == 0 },
		"the rejected pod's IP was not released: %v", allocatedIPs(t, n))
	if a.Logs.Count("capture failed; the runtime fails the pod", "pod=shop/refused") == 0 {
		t.Fatalf("the agent did not log the refusal:\n%s", a.Logs)
	}
}

// allocatedIPs are host-local's reservations (one file per address).
func allocatedIPs(t *testing.T, n *node) []string {
	var ips []string
	files, _ := filepath.Glob(filepath.Join(n.Dir, "ipam", "pods", "*"))
	for _, f := range files {
		if b := filepath.Base(f); b != "lock" && !strings.HasPrefix(b, "last_reserved_ip") {
			ips = append(ips, b)
		}
	}
	return ips
}

// A pod whose sandbox the agent missed (it was away) and cannot capture
// now gets no container: CreateContainer refuses it.
func TestNRICreateContainerGate(t *testing.T) {
	n := newNode(t)
	c := n.startContainerd(containerdOptions{})
	s := c.runPod("shop", "missed")
	a := n.startAgent(ambientNoZtunnel...)
	if a.Logs.Count("capture failed", "event=Synchronize", "pod=shop/missed") == 0 {
		t.Fatalf("Synchronize did not try the missed pod:\n%s", a.Logs)
	}
	out, err := c.Crictl(t.Context(), "create", s.ID, c.containerConfig("app"), c.podConfig("shop", "missed", nil))
	if err == nil {
		t.Fatalf("a container of an uncaptured pod was created: %s", out)
	}
	if !strings.Contains(err.Error(), "the pod is not captured") {
		t.Fatalf("create failed without the agent's reason: %v", err)
	}
}

// containerConfig is a crictl container config running the pause image.
func (c *containerd) containerConfig(name string) string {
	path := filepath.Join(c.n.Dir, "ctr-"+name+".json")
	conf := `{"metadata": {"name": "` + name + `"}, "image": {"image": "` + pauseRef + `"}, "linux": {}}`
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		c.n.t.Fatal(err)
	}
	return path
}
