// Package nri_test runs sluice-agent as an NRI plugin of a real containerd
// 2.x (built from the Go module proxy by hack/containerd/build.sh, cached
// by version) in namespaces made for each test, with crictl, the project's
// pause image and no sluice entry in any CNI config.
package nri_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicemesh/sluice/internal/ociimage"
	"github.com/sluicemesh/sluice/internal/productbuild"
	"github.com/sluicemesh/sluice/test/harness/agenttest"
	"github.com/sluicemesh/sluice/test/harness/kubetest"
	"github.com/sluicemesh/sluice/test/harness/nodetest"
)

const pauseRef = ociimage.PauseRef

// shared is built once per test binary, on first use.
var shared struct {
	once                                   sync.Once
	err                                    error
	dir, agent, containerd, plugins, pause string
}

// sharedAPI is the test kube-apiserver, started by the first test that
// needs it, with the agent's identity bound to the shipped ClusterRole.
var sharedAPI = &kubetest.Shared{User: agentUser, RBACFile: "../../deploy/rbac/clusterrole.yaml"}

func TestMain(m *testing.M) {
	code := m.Run()
	sharedAPI.Stop()
	if shared.dir != "" {
		os.RemoveAll(shared.dir)
	}
	os.Exit(code)
}

func build(t testing.TB) {
	t.Helper()
	shared.once.Do(func() { shared.err = buildShared() })
	if shared.err != nil {
		t.Fatal(shared.err)
	}
}

func buildShared() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	root, err := nodetest.ModuleRoot()
	if err != nil {
		return err
	}
	// The plugin beside the agent, as in the image: the installer reads it.
	bin, err := agenttest.Build(ctx, productbuild.Options{Dir: root})
	if err != nil {
		return err
	}
	shared.dir, shared.agent = bin.Dir, bin.Agent()
	cmd := exec.CommandContext(ctx, filepath.Join(root, "hack", "containerd", "build.sh"))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("hack/containerd/build.sh: %w", err)
	}
	shared.containerd = strings.TrimSpace(string(out))
	if shared.plugins, err = nodetest.CNIPlugins(ctx); err != nil {
		return err
	}
	shared.pause = filepath.Join(shared.dir, "pause.tar")
	if err := ociimage.PackPause(ctx, shared.pause, pauseRef); err != nil {
		return fmt.Errorf("pack the pause image: %w", err)
	}
	return nil
}

func containerdBinaries(t testing.TB) string { build(t); return shared.containerd }
func cniPlugins(t testing.TB) string         { build(t); return shared.plugins }
func pauseArchive(t testing.TB) string       { build(t); return shared.pause }
func agentBinary(t testing.TB) string        { build(t); return shared.agent }
func pluginBinary(t testing.TB) string       { build(t); return filepath.Join(shared.dir, "sluice") }
