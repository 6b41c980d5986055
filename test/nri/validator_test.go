package nri_test

import (
	"strings"
	"sync"
	"testing"
	"time"
)

// With containerd's default validator requiring the sluice plugin, a pod
// that starts while the agent is away gets no container until the agent
// is back and has captured it: the gap NRI leaves open (a missed or
// timed-out RunPodSandbox lets the sandbox start) is closed at the
// container.
func TestNRIValidatorGate(t *testing.T) {
	n := newNode(t)
	c := n.startContainerd(containerdOptions{validator: true})
	s := c.runPod("shop", "gated")
	podConf := c.podConfig("shop", "gated", nil)
	out, err := c.Crictl(t.Context(), "create", s.ID, c.containerConfig("app"), podConf)
	if err == nil {
		t.Fatalf("a container was created with the required plugin absent: %s", out)
	}
	if msg := err.Error(); !strings.Contains(msg, "required plugin") || !strings.Contains(msg, "sluice") || !strings.Contains(msg, "not present") {
		t.Fatalf("create failed, but not by the validator: %v", err)
	}

	// The agent's own pod must start while no agent is connected: it
	// carries the toleration annotation docs/nri.md names.
	tolerant := map[string]string{"sluice.dev/tolerate-missing-nri": "true"}
	own := c.Inspect(c.MustCrictl("runp", c.podConfig("sluice-system", "agent", tolerant)))
	c.MustCrictl("create", own.ID, c.containerConfig("agent"), c.podConfig("sluice-system", "agent", tolerant))

	n.startAgent()
	if n.enrolled(s.ID) == nil {
		t.Fatal("Synchronize did not enrol the gated pod")
	}
	c.MustCrictl("create", s.ID, c.containerConfig("app"), podConf)
	expectCaptured(t, n.netns(s))
}

// NRI serializes events node-wide; pods started at once are each captured,
// and their RunPodSandbox handlers, one after another, stay short.
func TestNRIConcurrentPods(t *testing.T) {
	n := newNode(t)
	c := n.startContainerd(containerdOptions{})
	a := n.startAgent()
	const pods = 4
	sandboxes := make([]sandbox, pods)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range pods {
		wg.Go(func() {
			out, err := c.Crictl(t.Context(), "runp", c.podConfig("shop", "burst-"+string(rune('a'+i)), nil))
			if err != nil {
				t.Errorf("runp %d: %v", i, err)
				return
			}
			sandboxes[i] = sandbox{ID: out}
		})
	}
	wg.Wait()
	t.Logf("%d concurrent runp took %v", pods, time.Since(start))
	if t.Failed() {
		t.FailNow()
	}
	for _, s := range sandboxes {
		s = c.Inspect(s.ID)
		if w := n.enrolled(s.ID); w == nil || w.Netns != s.Netns {
			t.Fatalf("sandbox %s: workload %v, want one in %s", s.ID, w, s.Netns)
		}
		expectCaptured(t, n.netns(s))
	}
	for _, l := range strings.Split(a.Logs.String(), "\n") {
		if strings.Contains(l, "msg=enrolled") {
			t.Log(l[strings.Index(l, "pod="):])
		}
	}
}
