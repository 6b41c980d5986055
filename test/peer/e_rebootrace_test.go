package peer

import (
	"os"
	"strconv"
	"testing"

	"github.com/sluicemesh/sluice/test/harness/lifecycletest"
)

// test/lifecycle's reboot racing the primary CNI's conflist, on istio-cni
// with Istio's chart defaults (its entry inserted into the primary
// conflist; istioOwnedCNIConfig off): the same 20 pods, the same stand-in
// primary rewriting its file throughout the boot. Its counts are recorded
// side by side with sluice's (docs/operations.md), not held to 0.
func TestIstioCNIRebootRacingPrimary(t *testing.T) {
	requireAgent(t)
	rolledOut(t, istioCNIImage)
	reboots := lifecycletest.RaceReboots
	if v, err := strconv.Atoi(os.Getenv("SLUICE_REBOOT_RACE_REBOOTS")); err == nil && v > 0 {
		reboots = v
	}
	m := istioMesh()
	m.RaceMeasured = "istio-cni measured against the racing primary, side by side with sluice"
	lifecycletest.RebootRacingPrimary(t, m, lifecycletest.ScenarioRebootRace, reboots)
}
