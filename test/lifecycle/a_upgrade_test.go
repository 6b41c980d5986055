package lifecycle

import (
	"testing"

	"github.com/sluicemesh/sluice/test/harness/lifecycletest"
)

// While pods of every kind start and stop on both nodes at over one a
// second each, `helm upgrade` rolls the agent to another build and `helm
// rollback` rolls it back. No mesh pod's app makes its first connection
// uncaptured (the pod's rules were in before the app ran), no plain pod's
// is captured, no pod fails for good or is evicted, and the extra start
// delay over the same churn with no rollout is logged and recorded
// (lifecycletest.ResultsEnv).
func TestRollingUpgradeUnderChurn(t *testing.T) {
	requireMesh(t)
	lifecycletest.RollingUpgrade(t, sluiceMesh())
}
