package node

import (
	"bytes"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/sluicemesh/sluice/test/harness/nodetest"
)

// helm uninstall takes the agent away and, with it, sluice's conflist: the
// runtime uses the primary conflist again, left byte for byte as the
// primary CNI wrote it.
// It runs last (file order).
func TestHelmUninstall(t *testing.T) {
	requireAgent(t)
	helm(t, "uninstall", release, "-n", releaseNS, "--wait")
	installed = false
	nodetest.Eventually(t, time.Minute, "no agent pod and the primary conflist restored", func() error {
		if n := len(agentPods(t)); n != 0 {
			return fmt.Errorf("%d agent pods", n)
		}
		got, err := os.ReadFile(cluster.ConfDir(nodetest.PrimaryConflist))
		if err != nil {
			return err
		}
		if !bytes.Equal(got, primary) {
			return fmt.Errorf("conflist differs from the primary's:\n%s\nwant:\n%s", got, primary)
		}
		if name, _, err := cluster.RuntimeConflist(); err != nil || name != nodetest.PrimaryConflist {
			return fmt.Errorf("the runtime uses %s (%v), not the primary", name, err)
		}
		return nil
	})
}
