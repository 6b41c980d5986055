// Package lifecycle runs sluice through a node's life on the hermetic
// two-node test cluster (test/harness/nodetest), with the scenarios of
// test/harness/lifecycletest that test/peer runs on istio-cni: a rolling
// upgrade and rollback of the chart while pods come and go on both nodes,
// and a reboot of a node with pods running. Each test asserts that no mesh
// pod's app ever runs uncaptured, as seen on the wire: a pod's own first
// connection and a prober's connections from outside the node.
package lifecycle

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/sluicemesh/sluice/test/harness/nodetest"
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
	nodetest.Suite{
		Name:   "test/lifecycle",
		Images: buildImages,
		// Two nodes: the churn is pinned to each in turn, and the reboot
		// takes the first down while the second stays Ready, as in a real
		// cluster, where the node lifecycle controller then taints it for
		// eviction.
		Options: nodetest.Options{Nodes: 2},
		Started: func(_ context.Context, c *nodetest.Cluster, _ nodetest.Options) error {
			cluster = c
			return nil
		},
	}.Main(m)
}

// buildImages builds this tree's images at tagA, and sluice's again at
// tagB.
func buildImages(ctx context.Context, dir string) ([]string, error) {
	var err error
	if images, err = nodetest.BuildImages(ctx, dir, tagA); err != nil {
		return nil, err
	}
	dirB := filepath.Join(dir, "b")
	if err := os.Mkdir(dirB, 0o755); err != nil {
		return nil, err
	}
	if _, err := nodetest.BuildImages(ctx, dirB, tagB); err != nil {
		return nil, err
	}
	return append(images.Archives, filepath.Join(dirB, "sluice.tar")), nil
}
