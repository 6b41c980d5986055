package node

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/sluicemesh/sluice/test/harness/nodetest"
)

// helm uninstall with uninstall.cleanup=true leaves the node as it was
// before sluice: no plugin, entry, journal, socket or nft table of sluice's,
// while a pod it captured keeps running and serving (now uncaptured). Runs
// after TestHelmUninstall (file order), with a release of its own.
func TestUninstallCleansTheNode(t *testing.T) {
	if installed {
		helm(t, "uninstall", release, "-n", releaseNS, "--wait")
		installed = false
	}
	helm(t, append([]string{"install", release, "deploy/helm/sluice", "-n", releaseNS}, chartValues("uninstall.cleanup=true")...)...)
	installed = true
	readyAgent(t, 2*time.Minute)
	ns := namespace(t, nil)
	s := cluster.RunningPod(t, ns, cluster.CreatePod(t, ns, sidecarPod("cleaned", unreachable, nil)).Name, time.Minute)
	recs := journalRecords(t, string(s.UID))
	if len(recs) != 1 {
		t.Fatalf("captured pod has %d journal records, want 1", len(recs))
	}
	if out, err := sluiceTable(recs[0].Netns); err != nil {
		t.Fatalf("sluice table in %s: %v\n%s", recs[0].Netns, err, out)
	}

	helm(t, "uninstall", release, "-n", releaseNS, "--wait")
	installed = false
	nodetest.Eventually(t, time.Minute, "no agent pod and nothing of sluice on the node", func() error {
		if n := len(agentPods(t)); n != 0 {
			return fmt.Errorf("%d agent pods", n)
		}
		if got, _ := os.ReadFile(cluster.ConfDir(nodetest.PrimaryConflist)); !bytes.Equal(got, primary) {
			return fmt.Errorf("conflist differs from the primary's:\n%s", got)
		}
		if name, _, err := cluster.RuntimeConflist(); err != nil || name != nodetest.PrimaryConflist {
			return fmt.Errorf("the runtime uses %s (%v), not the primary", name, err)
		}
		for _, p := range []string{"/opt/cni/bin/sluice", "/run/sluice/state", "/run/sluice/agent.sock", "/run/ztunnel/ztunnel.sock"} {
			if _, err := os.Lstat(cluster.NodePath(p)); !os.IsNotExist(err) {
				return fmt.Errorf("%s still on the node (%v)", p, err)
			}
		}
		if out, err := sluiceTable(recs[0].Netns); err == nil {
			return fmt.Errorf("the pod's sluice table is still there:\n%s", out)
		}
		if out, err := exec.Command("nsenter", "--net="+cluster.NetnsPath(), "nft", "list", "table", "inet", "sluice-host").CombinedOutput(); err == nil {
			return fmt.Errorf("the host probe table is still there:\n%s", out)
		}
		return nil
	})
	p := cluster.GetPod(t, ns, s.Name)
	if err := nodetest.IsRunning(p); err != nil {
		t.Fatalf("the pod after cleanup: %v", err)
	}
	if line, err := dialLine(s.Status.PodIP + ":8080"); err != nil || line != "app" {
		t.Errorf("node → %s:8080 after cleanup = %q, %v; want the app's own answer, uncaptured", s.Status.PodIP, line, err)
	}
}
