package nri_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicemesh/sluice/test/harness/nstest"
)

// A pod started by containerd is captured by the agent's NRI plugin with no
// conflist entry anywhere: real TCP from the pod lands on 15001 with its
// original destination; StopPodSandbox releases it while the netns is
// still there; the record carries the pod's IPs from the runtime.
func TestNRICapturesPod(t *testing.T) {
	n := newNode(t)
	c := n.startContainerd(containerdOptions{})
	a := n.startAgent()

	s := c.runPod("shop", "cart")
	w := n.enrolled(s.ID)
	if w == nil {
		t.Fatalf("sandbox %s not enrolled after runp; workloads: %v", s.ID, n.Workloads(t))
	}
	if w.Netns != s.Netns || w.IfName != "eth0" || w.Pod.GetNamespace() != "shop" || w.Pod.GetName() != "cart" ||
		w.Pod.GetUid() != "uid-shop-cart" {
		t.Fatalf("workload %v, want shop/cart uid-shop-cart eth0 in %s", w, s.Netns)
	}
	var ips []string
	for _, ip := range w.Ips {
		ips = append(ips, strings.Split(ip.Address, "/")[0]) // the agent answers in CIDR notation
	}
	if !slices.Contains(ips, s.IP) {
		t.Fatalf("workload IPs %v lack the pod's %s", ips, s.IP)
	}
	expectCaptured(t, n.netns(s))
	if entries := n.conflistEntries(); strings.Contains(entries, `"sluice"`) {
		t.Fatalf("a sluice entry is in the node's CNI config:\n%s", entries)
	}

	c.MustCrictl("stopp", s.ID)
	if n.enrolled(s.ID) != nil {
		t.Fatalf("sandbox %s still enrolled after stopp", s.ID)
	}
	if a.Logs.Count("msg=released", "event=StopPodSandbox", "sandbox="+s.ID[:12]) != 1 {
		t.Fatalf("no release at StopPodSandbox:\n%s", a.Logs)
	}
	c.MustCrictl("rmp", s.ID)
	nstest.Eventually(t, 5*time.Second, func() bool { return len(n.Workloads(t)) == 0 }, "workloads left after rmp")
}

// An agent switched to --trigger nri removes what a cni or both agent left
// once the runtime has confirmed NRI: its own conflist, sorting just before
// the primary, and the entry an earlier version put in the primary itself,
// leaving the rest of that file alone.
func TestNRIDropsLeftoverEntry(t *testing.T) {
	n := newNode(t)
	c := n.startContainerd(containerdOptions{})
	primary := filepath.Join(n.ConfDir, "10-pods.conflist")
	before, err := os.ReadFile(primary)
	if err != nil {
		t.Fatal(err)
	}
	withEntry := strings.Replace(string(before), "}}]}", `}}, {"type": "sluice", "socket": "/run/sluice/agent.sock"}]}`, 1)
	if withEntry == string(before) {
		t.Fatalf("could not add an entry to:\n%s", before)
	}
	if err := os.WriteFile(primary, []byte(withEntry), 0o644); err != nil {
		t.Fatal(err)
	}
	owned := filepath.Join(n.ConfDir, "10-pods-sluice.conflist")
	if err := os.WriteFile(owned, []byte(withEntry), 0o644); err != nil {
		t.Fatal(err)
	}
	a := n.startAgent()
	nstest.Eventually(t, 10*time.Second, func() bool {
		return a.Logs.Count("NRI confirmed; no sluice conflist entry is left") > 0
	}, "the agent did not drop the leftover entry:\n%s", a.Logs)
	after, _ := os.ReadFile(primary)
	if strings.Contains(string(after), `"sluice"`) || !strings.Contains(string(after), `"bridge"`) {
		t.Fatalf("primary after the drop:\n%s", after)
	}
	if _, err := os.Lstat(owned); !os.IsNotExist(err) {
		t.Fatalf("sluice's conflist left after the drop (%v)", err)
	}
	expectCaptured(t, n.netns(c.runPod("shop", "after-drop")))
}

// In "both" mode (migration) the chained plugin's ADD and the NRI event
// for the same sandbox converge on one record: the CNI ADD enrols, the NRI
// handler finds the pod enrolled and leaves it; teardown releases it once.
func TestNRIBothTriggersConverge(t *testing.T) {
	n := newNode(t)
	c := n.startContainerd(containerdOptions{chained: true})
	a := n.startAgent("--trigger", "both", "--install=false")
	s := c.runPod("shop", "both")
	ws := n.Workloads(t)
	if len(ws) != 1 || ws[0].ContainerId != s.ID || ws[0].Netns != s.Netns {
		t.Fatalf("workloads %v, want one for %s in %s", ws, s.ID, s.Netns)
	}
	if a.Logs.Count("method=/sluice.v1.CNI/Add", "code=OK") != 1 {
		t.Fatalf("the chained plugin's ADD did not reach the agent:\n%s", a.Logs)
	}
	if a.Logs.Count("already enrolled", "event=RunPodSandbox", "sandbox="+s.ID[:12]) != 1 {
		t.Fatalf("the NRI event did not find the CNI's record:\n%s", a.Logs)
	}
	expectCaptured(t, n.netns(s))
	c.MustCrictl("stopp", s.ID)
	c.MustCrictl("rmp", s.ID)
	if ws := n.Workloads(t); len(ws) != 0 {
		t.Fatalf("workloads left after rmp: %v", ws)
	}
}
