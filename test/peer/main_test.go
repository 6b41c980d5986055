// Package peer runs istio-cni, Istio's own CNI node agent and plugin,
// built from the Istio module test/istio pins and installed with Istio's
// own istio-cni chart, on the same test cluster test/node runs sluice on
// (internal/nodetest): so what the node's life does to pods can be
// measured against the real peer with the same pods, node and runtime.
//
// One two-node cluster serves the package; each test has its own
// namespace. The tests run in file order: install, a sidecar pod, an
// agent outage, then internal/lifecycletest's rolling upgrade under churn
// and reboot, the scenarios test/lifecycle runs on sluice.
package peer

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/sluicemesh/sluice/internal/nodetest"
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
	if os.Geteuid() != 0 {
		fmt.Println("test/peer: needs root (network and mount namespaces, cgroups); not run")
		os.Exit(0)
	}
	code, err := run(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, "test/peer:", err)
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
	dir, err := os.MkdirTemp("", "sluice-peer-images-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	if images, err = nodetest.BuildImages(ctx, dir, imageTag); err != nil {
		return 0, err
	}
	ref, archive, err := nodetest.IstioCNIImage(ctx, dir)
	if err != nil {
		return 0, err
	}
	istioCNIImage = ref
	ref, validation, err := nodetest.IstioValidationImage(ctx, dir)
	if err != nil {
		return 0, err
	}
	validationImage = ref
	archives := append(images.Archives, archive, validation)
	// Two nodes, as test/node and test/lifecycle run sluice on: the
	// churn is pinned to each in turn and the reboot takes the first down
	// while the second stays Ready.
	c, err := nodetest.Start(ctx, nodetest.Options{KubeBinDir: bins, CNIBinDir: plugins, Images: archives, Nodes: 2})
	if err != nil {
		return 0, err
	}
	cluster = c
	istioCNIImageB = istioCNIImage + "-b"
	if err := c.TagImage(ctx, istioCNIImage, istioCNIImageB); err != nil {
		return 0, errors.Join(err, c.Stop())
	}
	code := m.Run()
	if code != 0 {
		fmt.Fprintf(os.Stderr, "test/peer: the cluster's logs (kept in full only when teardown fails):\n%s", c.LogTails())
	}
	if err := c.Stop(); err != nil {
		return 1, err
	}
	return code, nil
}
