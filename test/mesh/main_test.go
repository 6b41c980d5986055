// Package mesh runs sluice under the real, unmodified Istio ambient mesh
// on the hermetic two-node test cluster (test/harness/nodetest): istiod built from the
// Istio module test/istio pins, ztunnel built from its own source
// (`make ztunnel ZTUNNEL_SRC=...`), both installed with Istio's own
// charts, and sluice with its own chart, ambient on. Pods are started by
// the kubelet through containerd and the CNI chain, and talk to each other
// over ztunnel's HBONE with istiod's certificates.
//
// One cluster serves the whole package; each test has its own namespace.
// The tests that need ztunnel skip, with one line naming the build
// command, only when no ztunnel binary was ever built on the machine; then
// the istiod test runs against the node tests' ZDS stand-in.
package mesh

import (
	"context"
	"errors"
	"testing"

	"github.com/sluicemesh/sluice/test/harness/meshtest"
	"github.com/sluicemesh/sluice/test/harness/nodetest"
)

var (
	cluster *nodetest.Cluster
	images  nodetest.Images
	charts  string // Istio's charts
	istiod  meshtest.Archive
	// ztunnelImage is the real ztunnel's image; zero when it was never
	// built, and noZtunnel says why.
	ztunnelImage meshtest.Archive
	noZtunnel    error
)

// imageTag tags the sluice image built for these tests.
const imageTag = "meshtest"

func TestMain(m *testing.M) {
	nodetest.Suite{
		Name:   "test/mesh",
		Images: buildImages,
		// Two nodes, ztunnel and the agent on each: pods talk across
		// them (h_nodes_test.go); the other tests keep to the first.
		Options: nodetest.Options{Nodes: 2},
		Started: func(ctx context.Context, c *nodetest.Cluster, _ nodetest.Options) error {
			cluster = c
			return installMesh(ctx)
		},
		Logs: meshLogs,
	}.Main(m)
}

// buildImages builds sluice's and the test app's images from this tree,
// istiod's (cached), and ztunnel's when its binary was built, and returns
// the archives to load into the node. sluice's are written to dir.
func buildImages(ctx context.Context, dir string) ([]string, error) {
	var err error
	if images, err = nodetest.BuildImages(ctx, dir, imageTag); err != nil {
		return nil, err
	}
	if charts, err = meshtest.Charts(ctx); err != nil {
		return nil, err
	}
	if istiod, err = meshtest.IstiodArchive(ctx); err != nil {
		return nil, err
	}
	archives := append(images.Archives, istiod.Path)
	ztunnelImage, err = meshtest.ZtunnelArchive(ctx)
	switch {
	case errors.Is(err, meshtest.ErrNoZtunnel):
		noZtunnel = err
	case err != nil:
		return nil, err
	default:
		archives = append(archives, ztunnelImage.Path)
	}
	return archives, nil
}
