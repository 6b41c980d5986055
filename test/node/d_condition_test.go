package node

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluicemesh/sluice/test/harness/nodetest"
)

// meshReady is the condition type the chart's default nodeCondition names.
const meshReady = "sluice.dev/MeshReady"

// meshCondition is nil once the node under test's MeshReady condition has
// status and a reason starting reason.
func meshCondition(t *testing.T, status corev1.ConditionStatus, reason string) error {
	n, err := client(t).CoreV1().Nodes().Get(t.Context(), cluster.NodeName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	for _, c := range n.Status.Conditions {
		if c.Type == meshReady {
			if c.Status != status || !strings.HasPrefix(c.Reason, reason) {
				return fmt.Errorf("%s=%s (%s: %s), heartbeat %v", c.Type, c.Status, c.Reason, c.Message, c.LastHeartbeatTime)
			}
			return nil
		}
	}
	return fmt.Errorf("node %s has no %s condition", cluster.NodeName, meshReady)
}

// noExecuteTaint is nil while the node carries no NoExecute taint at all
// (the node lifecycle controller's for a NotReady node is one; sluice adds
// none).
func noExecuteTaint(t *testing.T) error {
	n, err := client(t).CoreV1().Nodes().Get(t.Context(), cluster.NodeName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	for _, taint := range n.Spec.Taints {
		if taint.Effect == corev1.TaintEffectNoExecute {
			return fmt.Errorf("node %s tainted %s:%s", cluster.NodeName, taint.Key, taint.Effect)
		}
	}
	return nil
}

// The agent keeps its readiness on its Node (the chart's default
// nodeCondition): True (MeshReady) once it is ready and, ambient being on,
// the ztunnel stand-in is connected; False (AgentStopping) as soon as its
// pod is deleted (a graceful stop) and no agent replaces it. Through the
// outage the node stays Ready, with no NoExecute taint; the agent's return
// makes the condition True again.
func TestNodeConditionOutage(t *testing.T) {
	requireAgent(t)
	cs := client(t)
	if _, err := cs.AppsV1().DaemonSets(releaseNS).Create(t.Context(), images.ZtunnelStandIn(releaseNS, nil), metav1.CreateOptions{}); err != nil &&
		!apierrors.IsAlreadyExists(err) {
		t.Fatalf("create ztunnel DaemonSet: %v", err)
	}
	t.Cleanup(func() {
		_ = cs.AppsV1().DaemonSets(releaseNS).Delete(context.Background(), "ztunnel", metav1.DeleteOptions{})
	})
	nodetest.Eventually(t, time.Minute, "the condition True", func() error { return meshCondition(t, corev1.ConditionTrue, "MeshReady") })

	restore := agentOutage(t)
	nodetest.Eventually(t, time.Minute, "no agent running", func() error { return noRunningAgent(t) })
	// The agent set it on SIGTERM; nothing else writes it while none runs.
	if err := meshCondition(t, corev1.ConditionFalse, "AgentStopping"); err != nil {
		t.Fatalf("with the agent stopped: %v", err)
	}
	watch := nodetest.WatchNode(t, cs, cluster.NodeName)
	watch.Held(t, 15*time.Second)
	if err := noExecuteTaint(t); err != nil {
		t.Fatal(err)
	}
	if err := meshCondition(t, corev1.ConditionFalse, "AgentStopping"); err != nil {
		t.Fatalf("after 15 s of outage: %v", err)
	}

	restore()
	readyAgent(t, 2*time.Minute)
	nodetest.Eventually(t, time.Minute, "the condition True again", func() error { return meshCondition(t, corev1.ConditionTrue, "MeshReady") })
}
