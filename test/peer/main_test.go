// Package peer runs istio-cni, Istio's own CNI node agent and plugin,
// built from the Istio module test/istio pins and installed with Istio's
// own istio-cni chart, on the same test cluster test/node runs sluice on
// (test/harness/nodetest): so what the node's life does to pods can be
// measured against the real peer with the same pods, node and runtime.
//
// One two-node cluster serves the package; each test has its own
// namespace. The tests run in file order: install, a sidecar pod, an
// agent outage, then test/harness/lifecycletest's rolling upgrade under churn
// and reboot, the scenarios test/lifecycle runs on sluice.
package peer

import (
	"context"
	"testing"

	"github.com/sluicemesh/sluice/test/harness/nodetest"
)

var (
	cluster *nodetest.Cluster
	images  nodetest.Images
	// istioCNIImage is the istio-cni image's ref, loaded into the node;
	// validationImage the proxyv2 stand-in whose pilot-agent runs the
	// real istio-validation.
	istioCNIImage, validationImage string
	// istioCNIImageB is istioCNIImage's build under a second tag, which
	// the rolling upgrade moves to.
	istioCNIImageB string
)

// imageTag tags the images built from this tree (the test app's).
const imageTag = "peertest"

func TestMain(m *testing.M) {
	nodetest.Suite{
		Name:   "test/peer",
		Images: buildImages,
		// Two nodes, as test/node and test/lifecycle run sluice on: the
		// churn is pinned to each in turn and the reboot takes the first
		// down while the second stays Ready.
		Options: nodetest.Options{Nodes: 2},
		Started: func(ctx context.Context, c *nodetest.Cluster, _ nodetest.Options) error {
			cluster = c
			istioCNIImageB = istioCNIImage + "-b"
			return c.TagImage(ctx, istioCNIImage, istioCNIImageB)
		},
		Logs: agentLogs,
	}.Main(m)
}

// buildImages builds this tree's images (the test app's), istio-cni's
// and the proxyv2 stand-in's.
func buildImages(ctx context.Context, dir string) ([]string, error) {
	var err error
	if images, err = nodetest.BuildImages(ctx, dir, imageTag); err != nil {
		return nil, err
	}
	ref, archive, err := nodetest.IstioCNIImage(ctx, dir)
	if err != nil {
		return nil, err
	}
	istioCNIImage = ref
	ref, validation, err := nodetest.IstioValidationImage(ctx, dir)
	if err != nil {
		return nil, err
	}
	validationImage = ref
	return append(images.Archives, archive, validation), nil
}
