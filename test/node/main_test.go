// Package node runs sluice the way an operator does: `helm install` of
// deploy/helm/sluice with an image built from this tree (no Docker, no
// registry) into a real two-node Kubernetes (internal/nodetest), and
// pods created through the API that the kubelet starts through CRI,
// containerd and the CNI chain into the sluice plugin.
//
// One cluster serves the whole package; each test has its own namespace.
// The tests run in file order and build on each other where an operator's
// story does (install, use, upgrade, uninstall).
package node

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/sluicemesh/sluice/daemon/nodetaint"
	"github.com/sluicemesh/sluice/internal/nodetest"
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
	if os.Geteuid() != 0 {
		fmt.Println("test/node: needs root (network and mount namespaces, cgroups); not run")
		os.Exit(0)
	}
	code, err := run(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, "test/node:", err)
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
	kubeBins, cniPlugins = bins, plugins
	dir, err := os.MkdirTemp("", "sluice-node-images-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	if images, err = nodetest.BuildImages(ctx, dir, imageTag); err != nil {
		return 0, err
	}
	c, err := nodetest.Start(ctx, nodetest.Options{KubeBinDir: bins, CNIBinDir: plugins, Images: images.Archives,
		// A new node's startup taint, which the node's own agent removes.
		RegisterWithTaints: []corev1.Taint{{Key: nodetaint.DefaultKey, Effect: corev1.TaintEffectNoSchedule}},
		// A second node, Ready while the first is under test: with every
		// node NotReady the node lifecycle controller evicts nothing.
		Nodes: 2})
	if err != nil {
		return 0, err
	}
	cluster = c
	if primary, err = os.ReadFile(c.ConfDir(nodetest.PrimaryConflist)); err != nil {
		c.Stop()
		return 0, err
	}
	code := m.Run()
	if code != 0 {
		fmt.Fprintf(os.Stderr, "test/node: the cluster's logs (kept in full only when teardown fails):\n%s", c.LogTails())
	}
	if err := c.Stop(); err != nil {
		return 1, err
	}
	return code, nil
}
