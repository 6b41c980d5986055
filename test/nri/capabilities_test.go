package nri_test

import (
	"testing"

	"github.com/sluicemesh/sluice/test/harness/agenttest"
	"github.com/sluicemesh/sluice/test/harness/nodetest"
)

// The NRI plugin needs no capability the chart does not add: the agent
// started with exactly the shipped manifest's set (agenttest.Capped)
// synchronizes with containerd and captures a pod at runp.
func TestNRICapturesPodWithTheChartsCapabilities(t *testing.T) {
	root, err := nodetest.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	caps, err := agenttest.ChartCapabilities(root)
	if err != nil {
		t.Fatal(err)
	}
	n := newNode(t)
	n.capabilities = caps
	c := n.startContainerd(containerdOptions{})
	n.startAgent()
	s := c.runPod("capped", "cart")
	if n.enrolled(s.ID) == nil {
		t.Fatalf("sandbox %s not enrolled under %v; workloads: %v", s.ID, caps, n.Workloads(t))
	}
	expectCaptured(t, n.netns(s))
	c.MustCrictl("stopp", s.ID)
	c.MustCrictl("rmp", s.ID)
}
