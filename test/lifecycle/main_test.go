// Package lifecycle runs sluice through a node's life on the hermetic
// two-node test cluster (internal/nodetest), with the scenarios of
// internal/lifecycletest that test/peer runs on istio-cni: a rolling
// upgrade and rollback of the chart while pods come and go on both nodes,
// and a reboot of a node with pods running. Each test asserts that no mesh
// pod's app ever runs uncaptured, as seen on the wire: a pod's own first
// connection and a prober's connections from outside the node.
package lifecycle

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sluicemesh/sluice/internal/nodetest"
)

var (
	cluster *nodetest.Cluster
	images  nodetest.Images
)

// The two sluice builds the upgrade moves between; each is its own
// version string, which the agent logs.
const (
	tagA = "lifecycle-a"
	tagB = "lifecycle-b"
)

func TestMain(m *testing.M) {
	if os.Geteuid() != 0 {
		fmt.Println("test/lifecycle: needs root (network and mount namespaces, cgroups); not run")
		os.Exit(0)
	}
	code, err := run(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, "test/lifecycle:", err)
		os.Exit(1)
	}
	os.Exit(code)
}

func run(m *testing.M) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	bins, err := nodetest.KubeBinaries(ctx)
	if err != nil {
		return 0, err
	}
	plugins, err := nodetest.CNIPlugins(ctx)
	if err != nil {
		return 0, err
	}
	dir, err := os.MkdirTemp("", "sluice-lifecycle-images-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	if images, err = nodetest.BuildImages(ctx, filepath.Join(dir), tagA); err != nil {
		return 0, err
	}
	dirB := filepath.Join(dir, "b")
	if err := os.Mkdir(dirB, 0o755); err != nil {
		return 0, err
	}
	if _, err := nodetest.BuildImages(ctx, dirB, tagB); err != nil {
		return 0, err
	}
	archives := append(images.Archives, filepath.Join(dirB, "sluice.tar"))
	// Two nodes: the churn is pinned to each in turn, and the reboot takes
	// the first down while the second stays Ready, as in a real cluster,
	// where the node lifecycle controller then taints it for eviction.
	c, err := nodetest.Start(ctx, nodetest.Options{KubeBinDir: bins, CNIBinDir: plugins, Images: archives, Nodes: 2})
	if err != nil {
		return 0, err
	}
	cluster = c
	code := m.Run()
	if code != 0 {
		fmt.Fprintf(os.Stderr, "test/lifecycle: the cluster's logs:\n%s", c.LogTails())
	}
	if err := c.Stop(); err != nil {
		return 1, err
	}
	return code, nil
}
