package lifecycle

import (
	"testing"

	"github.com/sluicemesh/sluice/test/harness/lifecycletest"
)

// While pods of every kind start and stop on both nodes, the first node's
// agent is gone for lifecycletest.OutageHold (its DaemonSet pod replaced
// by one whose image is not there, as a failed upgrade leaves it), then
// back. The node stays Ready and untainted, so no pod is evicted (the
// churn pods tolerate a not-ready node for 5 s only); the pods created on
// it meanwhile wait in sandbox creation and start captured once the agent
// is back (plain ones uncaptured), none failing for good; the extra start
// delay over the same churn with no outage is logged and recorded
// (lifecycletest.ResultsEnv).
func TestAgentOutageUnderChurn(t *testing.T) {
	requireMesh(t)
	lifecycletest.Outage(t, sluiceMesh())
}
