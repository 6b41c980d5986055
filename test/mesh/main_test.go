// Package mesh runs sluice under the real, unmodified Istio ambient mesh
// on the hermetic test node (internal/nodetest): istiod built from the
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
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/sluicemesh/sluice/internal/meshtest"
	"github.com/sluicemesh/sluice/internal/nodetest"
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
	if os.Geteuid() != 0 {
		fmt.Println("test/mesh: needs root (network and mount namespaces, cgroups); not run")
		os.Exit(0)
	}
	code, err := run(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, "test/mesh:", err)
		os.Exit(1)
	}
	os.Exit(code)
}

func run(m *testing.M) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "sluice-mesh-images-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	archives, err := buildImages(ctx, dir)
	if err != nil {
		return 0, err
	}
	bins, err := nodetest.KubeBinaries(ctx)
	if err != nil {
		return 0, err
	}
	plugins, err := nodetest.CNIPlugins(ctx)
	if err != nil {
		return 0, err
	}
	c, err := nodetest.Start(ctx, nodetest.Options{KubeBinDir: bins, CNIBinDir: plugins, Images: archives})
	if err != nil {
		return 0, err
	}
	cluster = c
	code := 1
	if err = installMesh(ctx); err == nil {
		code = m.Run()
	}
	if code != 0 {
		fmt.Fprintf(os.Stderr, "test/mesh: the cluster's logs:\n%s\n%s", c.LogTails(), meshLogs())
	}
	if stopErr := c.Stop(); stopErr != nil {
		return 1, errors.Join(err, stopErr)
	}
	return code, err
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
