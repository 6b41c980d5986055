package nri_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicemesh/sluice/internal/nstest"
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
		t.Fatalf("sandbox %s not enrolled after runp; workloads: %v", s.ID, n.workloads())
	}
	if w.Netns != s.Netns || w.IfName != "eth0" || w.Pod.GetNamespace() != "shop" || w.Pod.GetName() != "cart" ||
		w.Pod.GetUid() != "uid-shop-cart" {
		t.Fatalf("workload %v, want shop/cart uid-shop-cart eth0 in %s", w, s.Netns)
	}
	var ips []string
	for _, ip := range w.Ips {
		ips = append(ips, ip.Address)
	}
	if !slices.Contains(ips, s.IP) {
		t.Fatalf("workload IPs %v lack the pod's %s", ips, s.IP)
	}
	expectCaptured(t, n.netns(s))
	if entries := n.conflistEntries(); strings.Contains(entries, `"sluice"`) {
		t.Fatalf("a sluice entry is in the node's CNI config:\n%s", entries)
	}

	c.mustCrictl("stopp", s.ID)
	if n.enrolled(s.ID) != nil {
		t.Fatalf("sandbox %s still enrolled after stopp", s.ID)
	}
	if a.logs.count("msg=released", "event=StopPodSandbox", "sandbox="+s.ID[:12]) != 1 {
		t.Fatalf("no release at StopPodSandbox:\n%s", a.logs)
	}
	c.mustCrictl("rmp", s.ID)
	nstest.Eventually(t, 5*time.Second, func() bool { return len(n.workloads()) == 0 }, "workloads left after rmp")
}
