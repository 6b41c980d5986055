package node

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/sluicemesh/sluice/daemon/nodetaint"
	"github.com/sluicemesh/sluice/test/harness/nodetest"
)

// Where the runtime never calls CNI STATUS (containerd 1.x, a conflist
// below cniVersion 1.1.0) even the agent-dependent STATUS (pluginStatus:
// agent) leaves the node Ready through an agent outage, while new mesh
// pods still fail closed: the case where the two STATUS choices behave
// alike. A cluster of its own, with the machine's containerd 1.x.
func TestAgentStatusOnContainerd1(t *testing.T) {
	sys, err := nodetest.SystemContainerd()
	if err != nil {
		t.Fatal(err)
	}
	withCluster(t, nodetest.Options{ContainerdBinDir: sys, CNIVersion: "1.0.0",
		RegisterWithTaints: []corev1.Taint{{Key: nodetaint.DefaultKey, Effect: corev1.TaintEffectNoSchedule}}})
	helm(t, append([]string{"install", release, "deploy/helm/sluice", "-n", releaseNS}, chartValues("pluginStatus=agent")...)...)
	installed = true
	readyAgent(t, 2*time.Minute)
	ns := namespace(t, nil)

	agentOutage(t)
	nodetest.Eventually(t, time.Minute, "no agent running", func() error { return noRunningAgent(t) })
	watch := nodetest.WatchNode(t, client(t), cluster.NodeName)
	mesh := cluster.CreatePod(t, ns, sidecarPod("during-outage", unreachable, nil))
	watch.Eventually(t, time.Minute, "the mesh pod's sandbox refused for want of an agent", func() error {
		return sandboxRefused(t, ns, mesh.Name)
	})
	watch.Held(t, 15*time.Second)
}

// withCluster points the package's helpers at a cluster of its own for the
// rest of the test, and back (and the cluster stopped) when it ends.
func withCluster(t *testing.T, opts nodetest.Options) {
	t.Helper()
	opts.KubeBinDir, opts.CNIBinDir, opts.Images = kubeBins, cniPlugins, images.Archives
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	c, err := nodetest.Start(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	prev, prevInstalled := cluster, installed
	cluster, installed = c, false
	t.Cleanup(func() {
		cluster, installed = prev, prevInstalled
		if err := c.Stop(); err != nil {
			t.Error(err)
		}
	})
}
