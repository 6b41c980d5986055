package peer

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluicemesh/sluice/test/harness/nodetest"
)

// installed is set once the chart is in; later tests install it
// themselves when run alone (-run).
var installed bool

// requireAgent installs Istio's istio-cni chart, sidecar mode only (ambient
// off), with the image built from the pinned Istio module and the node's
// CNI directories, and waits for its DaemonSet pod to be Ready. Repair
// deletes broken pods instead of reprogramming them in place (the
// default): in-place repair looks for the pod's netns among every process
// of the machine by pod IP, and the machine runs other test clusters with
// the same pod CIDR.
func requireAgent(t testing.TB) {
	t.Helper()
	if !installed {
		helm(t, "install", release, istioChart(t), "-n", releaseNS, "--create-namespace",
			"--set", "image="+istioCNIImage,
			"--set", "pullPolicy=Never",
			"--set", "cniBinDir=/opt/cni/bin",
			"--set", "cniConfDir=/etc/cni/net.d",
			"--set", "ambient.enabled=false",
			"--set", "repair.repairPods=false",
			"--set", "repair.deletePods=true")
		installed = true
	}
	readyAgent(t, 2*time.Minute)
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(agentLogs())
		}
	})
}

// agentLogs are the tails of the istio-cni pods' logs, for failures (the
// test's context is gone by then).
func agentLogs() string {
	ctx := context.Background()
	cs, err := cluster.Client()
	if err != nil {
		return err.Error()
	}
	l, err := cs.CoreV1().Pods(releaseNS).List(ctx, metav1.ListOptions{LabelSelector: agentLabel})
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, p := range l.Items {
		raw, err := cs.CoreV1().Pods(releaseNS).GetLogs(p.Name, &corev1.PodLogOptions{Container: "install-cni"}).DoRaw(ctx)
		fmt.Fprintf(&b, "istio-cni pod %s (%s) log (%v):\n%s\n", p.Name, nodetest.PodState(&p), err, nodetest.TailLines(string(raw), 40))
	}
	return b.String()
}

// Istio's chart runs install-cni on the node: its pod becomes Ready through
// the chart's own probe, istio-cni is chained last into the node's primary
// conflist, and the plugin is in the node's bin dir.
func TestIstioCNIInstall(t *testing.T) {
	start := time.Now()
	requireAgent(t)
	t.Logf("istio-cni Ready %.1fs after helm install", time.Since(start).Seconds())
	nodetest.Eventually(t, 30*time.Second, "istio-cni chained last", func() error {
		if types := cluster.RuntimeConflistTypes(t); len(types) < 2 || types[0] != "bridge" || types[len(types)-1] != "istio-cni" {
			return fmt.Errorf("node conflist plugins = %v, want bridge first and istio-cni last", types)
		}
		return nil
	})
	if st, err := os.Stat(cluster.NodePath("/opt/cni/bin/istio-cni")); err != nil || st.Mode()&0o111 == 0 {
		t.Errorf("plugin in the node's /opt/cni/bin: %v (mode %v)", err, st)
	}
}
