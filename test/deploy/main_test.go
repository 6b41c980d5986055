// Package deploy validates what ships to clusters: the Helm chart in
// deploy/helm/sluice and the manifests rendered from it. Renders go through
// the real helm binary (hack/helm/helm.sh builds it from the Go module
// proxy), objects through a real kube-apiserver (server-side dry-run,
// strict field validation), and the DaemonSet's command line through the
// real sluice-agent (--check-config), so the chart cannot drift from the
// agent's flags.
package deploy

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicemesh/sluice/internal/productbuild"
	"github.com/sluicemesh/sluice/test/harness/kubetest"
)

var (
	// repoRoot is the repository's top directory; every path below is
	// relative to it.
	repoRoot string
	// helmBin is the cached helm binary.
	helmBin string
	// agentBin is sluice-agent built from this tree.
	agentBin string
	// kube is the API server the rendered objects are sent to.
	kube *kubetest.Env
)

const chartDir = "deploy/helm/sluice"

func TestMain(m *testing.M) {
	code, err := run(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, "test/deploy:", err)
		os.Exit(1)
	}
	os.Exit(code)
}

func run(m *testing.M) (int, error) {
	wd, err := os.Getwd()
	if err != nil {
		return 0, err
	}
	repoRoot = filepath.Clean(filepath.Join(wd, "..", ".."))

	tmp, err := os.MkdirTemp("", "sluice-deploy-test-")
	if err != nil {
		return 0, fmt.Errorf("create temp dir: %w", err)
	}
	defer os.RemoveAll(tmp)

	// The three slow starts run at once: helm (a cold build takes a minute
	// or more, a warm one only execs), the agent build and the API server.
	type result struct {
		what string
		err  error
	}
	done := make(chan result, 3)
	go func() {
		out, err := command(repoRoot, nil, "hack/helm/helm.sh", "--path")
		helmBin = strings.TrimSpace(out)
		done <- result{"build helm", err}
	}()
	go func() {
		agentBin = filepath.Join(tmp, productbuild.AgentName)
		err := productbuild.Build(context.Background(), productbuild.Options{Dir: repoRoot}, tmp,
			productbuild.Target{Name: productbuild.AgentName, Pkg: productbuild.AgentPackage})
		done <- result{"build sluice-agent", err}
	}()
	var stopKube func()
	go func() {
		var err error
		kube, stopKube, err = kubetest.StartMain()
		done <- result{"start kube-apiserver", err}
	}()
	var errs []string
	for range 3 {
		if r := <-done; r.err != nil {
			errs = append(errs, fmt.Sprintf("%s: %v", r.what, r.err))
		}
	}
	if stopKube != nil {
		defer stopKube()
	}
	if len(errs) > 0 {
		return 0, fmt.Errorf("%s", strings.Join(errs, "\n"))
	}
	return m.Run(), nil
}

// command runs name in dir with extra env on top of the test's and returns
// its stdout; the error carries stderr.
func command(dir string, env []string, name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}
