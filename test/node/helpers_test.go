package node

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/sluicemesh/sluice/test/harness/nstest"
)

// The release the tests install, in the namespace Istio's CNI agent uses.
const (
	release   = "sluice"
	releaseNS = "kube-system"
	agentApp  = "sluice-agent" // the DaemonSet pods' app label
)

var seq atomic.Int64

func client(t testing.TB) *kubernetes.Clientset {
	t.Helper()
	return cluster.ClientT(t)
}

// namespace creates a namespace of the test's own, with labels, and
// deletes it when the test ends.
func namespace(t *testing.T, labels map[string]string) string {
	t.Helper()
	return cluster.TestNamespace(t, labels)
}

// helm runs the cached helm against the cluster (nodetest's Helm).
func helm(t testing.TB, args ...string) string {
	t.Helper()
	return cluster.HelmT(t, args...)
}

// chartValues are the values every install and upgrade sets: the image
// built from this tree, never pulled.
func chartValues(extra ...string) []string {
	args := []string{
		"--set", "image.repository=" + images.SluiceRepo,
		"--set", "image.tag=" + images.SluiceTag,
		"--set", "image.pullPolicy=Never",
		// Ambient on: sidecar pods are unaffected, and the ambient test
		// needs the ZDS socket mounted.
		"--set", "ambient.enabled=true",
	}
	for _, e := range extra {
		args = append(args, "--set", e)
	}
	return args
}

// agentPods are the DaemonSet's pods on the node under test.
func agentPods(t testing.TB) []corev1.Pod {
	t.Helper()
	return cluster.PodsOn(t, releaseNS, "app="+agentApp)
}

// readyAgent waits for exactly one agent pod on the node under test, not
// being deleted, Ready through the chart's readiness probe, and returns
// it.
func readyAgent(t testing.TB, timeout time.Duration) corev1.Pod {
	t.Helper()
	return cluster.ReadyPodOn(t, releaseNS, "app="+agentApp, timeout)
}

// logs is a container's log (nodetest's Logs).
func logs(t testing.TB, ns, pod, container string) string {
	return cluster.Logs(ns, pod, container)
}

// nodeNetns is the node's network namespace, for connecting to pods from
// the node as the kubelet's probes do.
func nodeNetns() *nstest.NS {
	return &nstest.NS{Name: "node", Path: cluster.NetnsPath()}
}

// dialLine connects from the node to addr and returns the first line it
// is sent.
func dialLine(addr string) (string, error) {
	c, err := nodeNetns().Dial("tcp", addr, 2*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	buf := make([]byte, 512)
	n, err := c.Read(buf)
	if n == 0 {
		return "", fmt.Errorf("read from %s: %w", addr, err)
	}
	return strings.TrimSpace(string(buf[:n])), nil
}
