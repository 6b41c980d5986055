package hostile

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicemesh/sluice/internal/nstest"
)

// floodRSSBoundKiB is what the agent may reach (VmHWM) while 2,000 clients
// fetch /metrics and /readyz at once.
const floodRSSBoundKiB = 64 << 10

// floodHealthPort has 2,000 clients on loopback fetch /metrics, /readyz and
// /healthz as fast as they are answered, for 4 s, while fresh pods' ADDs
// and STATUS calls go through the agent: each must succeed within the
// plugin's deadline, and the agent's peak RSS stay under the bound. Before
// readiness was computed on the agent's own schedule, every request dialled
// the agent's socket and ADDs failed with "try again later".
func floodHealthPort(t *testing.T, n *node) {
	flood := n.ns.Command(filepath.Join(binDir, "flood"), "-addr", "127.0.0.1:9890", "-clients", "2000",
		"-paths", "/metrics,/readyz,/healthz", "-for", "4s")
	var out strings.Builder
	flood.Stdout, flood.Stderr = &out, &out
	if err := flood.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- flood.Wait() }()
	calls := 0
	for flooding := true; flooding; calls++ {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("flood: %v\n%s", err, out.String())
			}
			flooding = false
		default:
		}
		pod := nstest.NewIn(t, n.root, fmt.Sprintf("flooded-%d", calls))
		if e, took := n.run(call{verb: "ADD", id: pod.Name, netns: pod.Path}); e != nil {
			t.Errorf("ADD during the flood: %v (after %v)", e, took)
		}
		if e, took := n.run(call{verb: "STATUS", conf: map[string]any{"cniVersion": "1.1.0"}}); e != nil {
			t.Errorf("STATUS during the flood: %v (after %v)", e, took)
		}
	}
	peak := vmKiB(t, n.agent.cmd.Process.Pid, "VmHWM")
	t.Logf("flood: %s; %d ADD and STATUS pairs; agent peak RSS %d KiB (bound %d KiB)", strings.TrimSpace(out.String()), calls, peak, floodRSSBoundKiB)
	if !strings.Contains(out.String(), "answered=") || strings.Contains(out.String(), "answered=0 ") {
		t.Fatalf("the flood got no answer at all: %s", out.String())
	}
	if peak > floodRSSBoundKiB {
		t.Errorf("agent peak RSS %d KiB over the bound %d KiB", peak, floodRSSBoundKiB)
	}
}
