package node

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/sluicemesh/sluice/test/harness/nodetest"
)

// helm upgrade with a changed value rolls the DaemonSet; the conflist
// entry stays throughout, and a pod created while the old agent is gone
// and the new one not yet Ready ends up captured.
func TestHelmUpgrade(t *testing.T) {
	requireAgent(t)
	ns := namespace(t, nil)
	old := readyAgent(t, time.Minute)
	helm(t, append([]string{"upgrade", release, "deploy/helm/sluice", "-n", releaseNS}, chartValues("logLevel=debug")...)...)
	nodetest.Eventually(t, time.Minute, "the old agent pod on its way out", func() error {
		for _, p := range agentPods(t) {
			if p.Name == old.Name && p.DeletionTimestamp == nil {
				return fmt.Errorf("%s not terminating", old.Name)
			}
		}
		return nil
	})
	if types := cluster.RuntimeConflistTypes(t); types[len(types)-1] != "sluice" {
		t.Fatalf("conflist plugins during the roll = %v, want the sluice entry kept", types)
	}
	p := cluster.CreatePod(t, ns, sidecarPod("during-upgrade", unreachable, nil))

	agent := readyAgent(t, 2*time.Minute)
	if agent.Name == old.Name {
		t.Fatalf("agent pod %s was not replaced", agent.Name)
	}
	if args := agent.Spec.Containers[0].Args; !slices.Contains(args, "--log-level=debug") {
		t.Errorf("new agent's args = %q, want the upgraded --log-level=debug", args)
	}
	if types := cluster.RuntimeConflistTypes(t); types[len(types)-1] != "sluice" {
		t.Errorf("conflist plugins after the roll = %v, want the sluice entry", types)
	}
	cluster.RunningPod(t, ns, p.Name, time.Minute)
	cluster.LogShows(t, ns, p.Name, "app", 30*time.Second,
		"app dial "+unreachable+": proxy captured on :15001 original dst "+unreachable)
}
