package mesh

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicemesh/sluice/internal/ociimage"
	"github.com/sluicemesh/sluice/test/harness/nodetest"
)

// upgradeSluice builds sluice's image again under a new tag, loads it into
// the node and `helm upgrade`s the release to it, as an operator rolls a
// new version out, then waits for the new agent to serve with ztunnel
// connected.
func upgradeSluice(t *testing.T) {
	t.Helper()
	tag := imageTag + "-upgrade"
	plugin, err := ociimage.GoBinary(t.Context(), ociimage.PluginPackage, tag)
	if err != nil {
		t.Fatal(err)
	}
	agentBin, err := ociimage.GoBinary(t.Context(), ociimage.AgentPackage, tag)
	if err != nil {
		t.Fatal(err)
	}
	img, err := ociimage.Sluice(plugin, agentBin, tag)
	if err != nil {
		t.Fatal(err)
	}
	archive := filepath.Join(t.TempDir(), "sluice.tar")
	if _, err := ociimage.WriteOCI(archive, ociimage.SluiceRepo+":"+tag, img); err != nil {
		t.Fatal(err)
	}
	for _, n := range cluster.Nodes() {
		if err := n.ImportImage(t.Context(), archive); err != nil {
			t.Fatal(err)
		}
	}
	args := append([]string{"upgrade", "sluice", "deploy/helm/sluice", "-n", releaseNS}, sluiceValues("image.tag="+tag)...)
	if out, err := helmRun(t.Context(), append(args, "--wait", "--timeout", "3m")...); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	eventually(t, 2*time.Minute, "the upgraded agent serving", func() error {
		p, err := onePod(t, releaseNS, "app="+agentApp, cluster.NodeName)
		if err != nil {
			return err
		}
		if !nodetest.PodReady(p) || !strings.Contains(logs(t, releaseNS, p.Name, "sluice-agent"), "version="+tag) {
			return fmt.Errorf("%s: %s, not yet version %s", p.Name, nodetest.PodState(p), tag)
		}
		return nil
	})
	waitZtunnelConnected(t)
}
