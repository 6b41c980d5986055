package lifecycle

import (
	"testing"

	"github.com/sluicemesh/sluice/test/harness/lifecycletest"
)

// The first node reboots with sidecar and ambient pods running: kubelet,
// containerd, the agent and every container die, /run is emptied, and
// the node boots again; every pod gets a new sandbox and netns. A prober
// outside the node dials each pod's app port throughout and is never
// answered by the app itself (uncaptured inbound, the sign of a pod whose
// rules are not in); each pod's app, restarted, makes its first
// connection captured; sidecar pods answer through their proxy and
// ambient pods through ztunnel again.
func TestReboot(t *testing.T) {
	requireMesh(t)
	lifecycletest.Reboot(t, sluiceMesh())
}
