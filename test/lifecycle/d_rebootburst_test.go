package lifecycle

import (
	"os"
	"strconv"
	"testing"

	"github.com/sluicemesh/sluice/test/harness/lifecycletest"
)

// A rebooted node's burst: the first node, its kubelet's maxPods set to
// 40, is filled with sidecar and ambient pods beside what runs there and
// rebooted, so every sandbox is made again at once while the agent starts.
// No pod may start uncaptured, none may get a FailedCreatePodSandBox Event
// (an ADD that waits for the agent or for its turn succeeds; none times
// out), and the agent's ADD queue depth is read from its metrics
// throughout. make bench runs it at the kubelet's default maxPods, 110
// (SLUICE_BURST_MAX_PODS).
func TestRebootBurst(t *testing.T) {
	requireMesh(t)
	maxPods := lifecycletest.BurstMaxPods
	if v, err := strconv.Atoi(os.Getenv("SLUICE_BURST_MAX_PODS")); err == nil && v > 0 {
		maxPods = v
	}
	lifecycletest.RebootBurst(t, sluiceMesh(), maxPods, func() (float64, error) {
		return lifecycletest.AgentMetric(cluster, healthPort, "sluice_cni_adds_waiting")
	})
}

// healthPort is the chart's healthPort: the agent's /metrics on the node.
const healthPort = 9890
