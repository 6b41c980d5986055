package nodetest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Helm runs the cached helm (hack/helm) against the cluster from the
// module root, so a chart path like deploy/helm/sluice resolves, with a
// helm home of the cluster's own, and returns its output (an error
// leaves the output to the caller).
func (c *Cluster) Helm(ctx context.Context, args ...string) (string, error) {
	root, err := ModuleRoot()
	if err != nil {
		return "", err
	}
	bin, err := exec.CommandContext(ctx, filepath.Join(root, "hack", "helm", "helm.sh"), "--path").Output()
	if err != nil {
		return "", fmt.Errorf("helm.sh --path: %w", err)
	}
	home := filepath.Join(c.Dir, "helm-home")
	cmd := exec.CommandContext(ctx, strings.TrimSpace(string(bin)), args...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "KUBECONFIG="+c.Kubeconfig(),
		"HELM_CACHE_HOME="+home+"/cache", "HELM_CONFIG_HOME="+home+"/config", "HELM_DATA_HOME="+home+"/data")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("helm %s: %w", strings.Join(args, " "), err)
	}
	return string(out), nil
}

// HelmT is Helm failing t on error. Not t's context: cleanups run helm
// too.
func (c *Cluster) HelmT(t testing.TB, args ...string) string {
	t.Helper()
	out, err := c.Helm(context.Background(), args...)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	return out
}
