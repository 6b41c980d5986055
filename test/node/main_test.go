// Package node runs sluice the way an operator does: `helm install` of
// deploy/helm/sluice with an image built from this tree (no Docker, no
// registry) into a real two-node Kubernetes (test/harness/nodetest), and
// pods created through the API that the kubelet starts through CRI,
// containerd and the CNI chain into the sluice plugin.
//
// One cluster serves the whole package; each test has its own namespace.
// The tests run in file order and build on each other where an operator's
// story does (install, use, upgrade, uninstall).
package node

import (
	"context"
	"os"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/sluicemesh/sluice/daemon/nodetaint"
	"github.com/sluicemesh/sluice/test/harness/nodetest"
)

var (
	cluster *nodetest.Cluster
	images  nodetest.Images
	// kubeBins and cniPlugins are the binaries' dirs, for a test that
	// starts a cluster of its own.
	kubeBins, cniPlugins string
	// primary is the node's primary conflist as the cluster wrote it,
	// before sluice was installed.
	primary []byte
)

// imageTag tags the sluice image built for these tests.
const imageTag = "nodetest"

func TestMain(m *testing.M) {
	nodetest.Suite{
		Name: "test/node",
		Images: func(ctx context.Context, dir string) ([]string, error) {
			var err error
			images, err = nodetest.BuildImages(ctx, dir, imageTag)
			return images.Archives, err
		},
		Options: nodetest.Options{
			// A new node's startup taint, which the node's own agent removes.
			RegisterWithTaints: []corev1.Taint{{Key: nodetaint.DefaultKey, Effect: corev1.TaintEffectNoSchedule}},
			// A second node, Ready while the first is under test: with every
			// node NotReady the node lifecycle controller evicts nothing.
			Nodes: 2,
		},
		Started: func(_ context.Context, c *nodetest.Cluster, opts nodetest.Options) error {
			cluster, kubeBins, cniPlugins = c, opts.KubeBinDir, opts.CNIBinDir
			var err error
			primary, err = os.ReadFile(c.ConfDir(nodetest.PrimaryConflist))
			return err
		},
	}.Main(m)
}
