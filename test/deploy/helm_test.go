package deploy

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/sluicemesh/sluice/test/harness/kubetest"
)

// TestHelmInstallUpgradeUninstall drives the chart through helm's own
// lifecycle against the test API server: install (and its NOTES), an
// upgrade that turns ambient on, uninstall. Nothing runs the pods here (no
// kubelet, no controllers); this is about the objects helm manages.
func TestHelmInstallUpgradeUninstall(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cs := kubernetes.NewForConfigOrDie(kube.AdminConfig())
	const ns, release = "helm-lifecycle", "lifecycle"
	name := release + "-agent"
	kubeconfig := kube.Kubeconfig(t, kubetest.Admin)
	home := t.TempDir() // helm's cache, config and data: not the user's
	env := []string{"HELM_CACHE_HOME=" + home, "HELM_CONFIG_HOME=" + home, "HELM_DATA_HOME=" + home}
	helm := func(args ...string) string {
		t.Helper()
		args = append(args, "--kubeconfig", kubeconfig, "--namespace", ns)
		out, err := command(repoRoot, env, helmBin, args...)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}

	out := helm("install", release, chartDir, "--create-namespace")
	for _, want := range []string{
		"kubectl -n " + ns + " rollout status daemonset/" + name,
		"kubectl -n " + ns + " exec daemonset/" + name + " -- sluice-agent status",
		"/readyz",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("install NOTES lack %q:\n%s", want, out)
		}
	}
	ds, err := cs.AppsV1().DaemonSets(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("after install: %v", err)
	}
	if got := ds.Spec.Template.Spec.Containers[0].Args; !slices.Contains(got, "--ambient=false") {
		t.Errorf("installed args %q", got)
	}

	helm("upgrade", release, chartDir, "--set", "ambient.enabled=true")
	ds, err = cs.AppsV1().DaemonSets(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("after upgrade: %v", err)
	}
	if got := ds.Spec.Template.Spec.Containers[0].Args; !slices.Contains(got, "--ambient=true") {
		t.Errorf("upgraded args %q, want --ambient=true", got)
	}

	helm("uninstall", release, "--wait")
	if _, err := cs.AppsV1().DaemonSets(ns).Get(ctx, name, metav1.GetOptions{}); err == nil {
		t.Error("DaemonSet still there after uninstall")
	}
	if _, err := cs.RbacV1().ClusterRoles().Get(ctx, name, metav1.GetOptions{}); err == nil {
		t.Error("ClusterRole still there after uninstall")
	}
}
