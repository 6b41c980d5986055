package nodetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/sluicemesh/sluice/internal/ociimage"
)

// KubeVersion is the Kubernetes release the node runs.
const KubeVersion = "v1.37.2"

// cacheDir is $SLUICE_CACHE, else ~/.cache/sluice, as the Makefile's.
func cacheDir() (string, error) {
	if c := os.Getenv("SLUICE_CACHE"); c != "" {
		return c, nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("locate the cache: %w", err)
	}
	return filepath.Join(home, ".cache", "sluice"), nil
}

// ModuleRoot is the directory of this repository's go.mod, found by
// walking up from the working directory (a test's is its package dir).
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}

// KubeBinaries returns the directory of the cached Kubernetes binaries,
// building them with hack/kube/build.sh on first use (minutes, once per
// machine and version).
func KubeBinaries(ctx context.Context) (string, error) {
	root, err := ModuleRoot()
	if err != nil {
		return "", err
	}
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, filepath.Join(root, "hack", "kube", "build.sh"), KubeVersion)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("build the Kubernetes binaries: %w\n%s", err, stderr.Bytes())
	}
	return strings.TrimSpace(string(out)), nil
}

// CNIPlugins returns the directory of the reference plugins the node's
// primary CNI runs, building them into the cache (as `make plugins` does)
// if they are not there.
func CNIPlugins(ctx context.Context) (string, error) {
	root, err := ModuleRoot()
	if err != nil {
		return "", err
	}
	cache, err := cacheDir()
	if err != nil {
		return "", err
	}
	v, err := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Version}}", "github.com/containernetworking/plugins").Output()
	if err != nil {
		return "", fmt.Errorf("find the CNI plugins' version: %w", err)
	}
	dir := filepath.Join(cache, "cni-plugins", strings.TrimSpace(string(v)))
	if _, err := os.Stat(filepath.Join(dir, "loopback")); err == nil {
		return dir, nil
	}
	cmd := exec.CommandContext(ctx, "go", "build", "-o", dir+"/",
		"github.com/containernetworking/plugins/plugins/main/bridge",
		"github.com/containernetworking/plugins/plugins/ipam/host-local",
		"github.com/containernetworking/plugins/plugins/main/loopback")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build the CNI plugins: %w\n%s", err, out)
	}
	return dir, nil
}

// Image refs and archives the node tests load.
type Images struct {
	SluiceRepo, SluiceTag string
	TestApp               string
	Archives              []string
}

// BuildImages builds the sluice image from this source, the test-app and
// the pause image (hack/image) into dir.
func BuildImages(ctx context.Context, dir, tag string) (Images, error) {
	im := Images{SluiceRepo: ociimage.SluiceRepo, SluiceTag: tag, TestApp: ociimage.TestAppRef}
	plugin, err := ociimage.GoBinary(ctx, ociimage.PluginPackage, tag)
	if err != nil {
		return im, err
	}
	agent, err := ociimage.GoBinary(ctx, ociimage.AgentPackage, tag)
	if err != nil {
		return im, err
	}
	app, err := ociimage.GoBinary(ctx, ociimage.TestAppPackage, tag)
	if err != nil {
		return im, err
	}
	pauseBin, err := ociimage.GoBinary(ctx, ociimage.PausePackage, tag)
	if err != nil {
		return im, err
	}
	sluice, err := ociimage.Sluice(plugin, agent, tag)
	if err != nil {
		return im, err
	}
	testApp, err := ociimage.TestApp(app)
	if err != nil {
		return im, err
	}
	pauseImg, err := ociimage.Pause(pauseBin)
	if err != nil {
		return im, err
	}
	if _, err := ociimage.WriteOCI(filepath.Join(dir, "sluice.tar"), ociimage.SluiceRepo+":"+tag, sluice); err != nil {
		return im, err
	}
	if _, err := ociimage.WriteOCI(filepath.Join(dir, "testapp.tar"), ociimage.TestAppRef, testApp); err != nil {
		return im, err
	}
	if _, err := ociimage.WriteOCI(filepath.Join(dir, "pause.tar"), ociimage.PauseRef, pauseImg); err != nil {
		return im, err
	}
	im.Archives = []string{filepath.Join(dir, "pause.tar"), filepath.Join(dir, "sluice.tar"), filepath.Join(dir, "testapp.tar")}
	return im, nil
}
