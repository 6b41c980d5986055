package peer

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/sluicemesh/sluice/test/harness/nodetest"
)

// The release the tests install, where Istio installs it, and the labels
// of its DaemonSet's pods.
const (
	release    = "istio-cni"
	releaseNS  = "istio-system"
	agentLabel = "k8s-app=istio-cni-node"
	agentDS    = "istio-cni-node"
	// excludedNS is a namespace the chart's default excludeNamespaces
	// holds, as sluice's default does.
	excludedNS = "kube-system"
)

var seq atomic.Int64

func client(t testing.TB) *kubernetes.Clientset {
	t.Helper()
	return cluster.ClientT(t)
}

// namespace creates a namespace of the test's own and deletes it when the
// test ends.
func namespace(t testing.TB) string {
	t.Helper()
	return cluster.TestNamespace(t, nil)
}

// helm runs the cached helm against the cluster (nodetest's Helm).
func helm(t testing.TB, args ...string) string {
	t.Helper()
	return cluster.HelmT(t, args...)
}

// istioChart is Istio's own istio-cni chart, in the module cache at the
// version test/istio pins (hack/istiod/build.sh has downloaded it).
func istioChart(t testing.TB) string {
	t.Helper()
	root, err := nodetest.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "istio.io/istio")
	cmd.Dir = filepath.Join(root, "test", "istio")
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("locate istio.io/istio: %v", err)
	}
	return filepath.Join(strings.TrimSpace(string(out)), "manifests", "charts", "istio-cni")
}

// readyAgent waits for exactly one istio-cni pod on the node under test,
// not being deleted, Ready through the chart's readiness probe, and
// returns it.
func readyAgent(t testing.TB, timeout time.Duration) corev1.Pod {
	t.Helper()
	return cluster.ReadyPodOn(t, releaseNS, agentLabel, timeout)
}

// logs is a container's log (nodetest's Logs).
func logs(t testing.TB, ns, pod, container string) string {
	return cluster.Logs(ns, pod, container)
}
