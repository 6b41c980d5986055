package lifecycle

import (
	"context"
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
	lifecycletest.RebootRacingPrimary(t, sluiceMesh(), lifecycletest.ScenarioRebootRace, reboots)
}

// The same racing reboot with sluice as an NRI plugin of the node's
// containerd (trigger=nri), set up as docs/nri.md tells an operator to:
// the runtime's validator requires the plugin, the agent's own pod
// tolerates its absence. sluice has no conflist entry there, so the
// rewrites cannot take it out of anything; what the reboot races is the
// agent's connection to the runtime, which the validator holds every
// container to. The node's containerd drops the validator again and the
// chart goes back to chained mode afterwards, through one more reboot.
func TestRebootRacingPrimaryNRI(t *testing.T) {
	requireMesh(t)
	const plugin, tolerate = "sluice", "sluice.dev/tolerate-missing-nri"
	t.Cleanup(func() {
		if err := cluster.RequireNRIPlugin("", ""); err != nil {
			t.Fatal(err)
		}
		if err := cluster.Reboot(context.Background()); err != nil {
			t.Fatal(err)
		}
		helm(t, chartArgs("upgrade", tagA)...)
		rolledOut(t, tagA)
	})
	helm(t, append(chartArgs("upgrade", tagA), "--set", "trigger=nri",
		"--set-string", "podAnnotations.sluice\\.dev/tolerate-missing-nri=true")...)
	rolledOut(t, tagA)
	if err := cluster.RequireNRIPlugin(plugin, tolerate); err != nil {
		t.Fatal(err)
	}
	reboots := lifecycletest.RaceReboots
	if v, err := strconv.Atoi(os.Getenv("SLUICE_REBOOT_RACE_REBOOTS")); err == nil && v > 0 {
		reboots = v
	}
	lifecycletest.RebootRacingPrimary(t, sluiceMesh(), lifecycletest.ScenarioRebootRaceNRI, reboots)
}
