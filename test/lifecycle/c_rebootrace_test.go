package lifecycle

import (
	"os"
	"strconv"
	"testing"

	"github.com/sluicemesh/sluice/test/harness/lifecycletest"
)

// A reboot racing the primary CNI's conflist (issue: pods started through
// a chain with no mesh CNI in it after the primary rewrote its file while
// the agent was away). The first node holds 20 mesh pods, sidecar and
// ambient, whose apps dial out the moment they start, and reboots while a
// stand-in primary rewrites its conflist without sluice's entry every
// 200 ms, from the moment the node goes down until 3 s after the agent is
// Ready, and once more while the node runs. Counted from the pods' side:
// no restarted app's first connection uncaptured, no probe answered by an
// app itself. sluice's entry is in a conflist of its own that sorts before
// the primary's (installer), so the rewrites never take it out of the
// runtime's chain; make bench runs 50 reboots (SLUICE_REBOOT_RACE_REBOOTS).
func TestRebootRacingPrimary(t *testing.T) {
	requireMesh(t)
	reboots := lifecycletest.RaceReboots
	if v, err := strconv.Atoi(os.Getenv("SLUICE_REBOOT_RACE_REBOOTS")); err == nil && v > 0 {
		reboots = v
	}
	lifecycletest.RebootRacingPrimary(t, sluiceMesh(), reboots)
}
