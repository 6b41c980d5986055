package node

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sluicemesh/sluice/test/harness/nodetest"
)

// setAgentNodeSelector points the DaemonSet at nodes labelled key=value
// (none carries it) or, with value "", back at every node.
func setAgentNodeSelector(t *testing.T, key, value string) {
	t.Helper()
	v := `null`
	if value != "" {
		v = `"` + value + `"`
	}
	patch := []byte(`{"spec":{"template":{"spec":{"nodeSelector":{"` + key + `":` + v + `}}}}}`)
	if _, err := client(t).AppsV1().DaemonSets(releaseNS).Patch(context.Background(), release+"-agent", types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("patch the agent DaemonSet's nodeSelector: %v", err)
	}
}

// agentOutage takes the agent of the node under test away as a failed
// upgrade does: the DaemonSet's image replaced by one that is not on the
// node (pull policy Never), rolled out OnDelete and only there, so the
// other node keeps its agent and stays Ready. The returned func puts the
// image and the rolling update back and replaces the broken pod.
func agentOutage(t *testing.T) (restore func()) {
	t.Helper()
	image := readyAgent(t, time.Minute).Spec.Containers[0].Image
	patchAgentDaemonSet(t, `{"spec":{"updateStrategy":{"type":"OnDelete","rollingUpdate":null},`+
		`"template":{"spec":{"containers":[{"name":"sluice-agent","image":"sluice-absent:outage"}]}}}}`)
	deleteAgentPods(t)
	done := false
	restore = func() {
		if done {
			return
		}
		done = true
		patchAgentDaemonSet(t, `{"spec":{"updateStrategy":{"type":"RollingUpdate","rollingUpdate":{"maxUnavailable":1}},`+
			`"template":{"spec":{"containers":[{"name":"sluice-agent","image":"`+image+`"}]}}}}`)
		deleteAgentPods(t)
	}
	t.Cleanup(restore)
	return restore
}

func patchAgentDaemonSet(t *testing.T, patch string) {
	t.Helper()
	if _, err := client(t).AppsV1().DaemonSets(releaseNS).Patch(context.Background(), release+"-agent", types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatalf("patch the agent DaemonSet: %v", err)
	}
}

// deleteAgentPods deletes the agent pods of the node under test; the
// DaemonSet makes a new one from its current template.
func deleteAgentPods(t *testing.T) {
	t.Helper()
	for _, p := range agentPods(t) {
		if err := client(t).CoreV1().Pods(releaseNS).Delete(context.Background(), p.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatalf("delete agent pod %s: %v", p.Name, err)
		}
	}
}

// noRunningAgent is true when no agent container runs on the node.
func noRunningAgent(t *testing.T) error {
	for _, p := range agentPods(t) {
		for _, c := range p.Status.ContainerStatuses {
			if c.State.Running != nil {
				return fmt.Errorf("agent pod %s runs", p.Name)
			}
		}
	}
	return nil
}

// An agent outage (a failed upgrade: the DaemonSet's pod replaced by one
// whose image is not there) is not a node outage, on a cluster whose other
// node stays Ready, so the node lifecycle controller would evict. For as
// long as a failing CNI STATUS takes to show (the node NotReady ~4 s after
// the agent goes, with containerd 2.x and a 1.1.0 conflist) the node stays
// Ready and untainted, a running pod that tolerates a not-ready node for
// only 5 s is not evicted, the kubelet restarts its killed container, and a
// pod in an excluded namespace starts; a new mesh pod fails closed, the
// conflist entry stays, and the pod starts captured within seconds of the
// agent's return.
func TestAgentOutage(t *testing.T) {
	requireAgent(t)
	ns := namespace(t, nil)
	running := cluster.RunningPod(t, ns, cluster.CreatePod(t, ns, evictedSoon(sidecarPod("running", unreachable, nil))).Name, time.Minute)

	restore := agentOutage(t)
	nodetest.Eventually(t, time.Minute, "no agent running", func() error { return noRunningAgent(t) })
	watch := nodetest.WatchNode(t, client(t), cluster.NodeName)
	if types := cluster.RuntimeConflistTypes(t); types[len(types)-1] != "sluice" {
		t.Fatalf("conflist plugins with the agent away = %v, want the sluice entry kept", types)
	}

	cluster.KillPodContainer(t, running, "app")
	excluded := cluster.CreatePod(t, releaseNS, plainPod(fmt.Sprintf("outage-excluded-%d", seq.Add(1)), unreachable))
	t.Cleanup(func() { cluster.DeletePod(releaseNS, excluded.Name) })
	mesh := cluster.CreatePod(t, ns, sidecarPod("during-outage", unreachable, nil))

	watch.Eventually(t, time.Minute, "the killed container restarted", func() error {
		return nodetest.Restarted(cluster.GetPod(t, ns, running.Name), "app")
	})
	t.Logf("killed container running again %.1fs into the outage", watch.Elapsed().Seconds())
	watch.Eventually(t, time.Minute, "the excluded pod running", func() error {
		return nodetest.IsRunning(cluster.GetPod(t, releaseNS, excluded.Name))
	})
	t.Logf("excluded pod running %.1fs into the outage", watch.Elapsed().Seconds())
	watch.Eventually(t, time.Minute, "the mesh pod's sandbox refused for want of an agent", func() error {
		return sandboxRefused(t, ns, mesh.Name)
	})
	if got := cluster.GetPod(t, ns, mesh.Name); got.Status.Phase != corev1.PodPending {
		t.Fatalf("mesh pod created with no agent: %s, want Pending", nodetest.PodState(got))
	}
	watch.Held(t, 15*time.Second)

	if got := cluster.GetPod(t, ns, running.Name); got.UID != running.UID || got.DeletionTimestamp != nil {
		t.Fatalf("the running pod was evicted during the outage: %s", nodetest.PodState(got))
	}

	restore()
	readyAgent(t, 2*time.Minute)
	back := time.Now()
	// The kubelet retries a failed sandbox after its pod worker's backoff
	// (10 s); the pod then starts through the new agent, captured.
	cluster.RunningPod(t, ns, mesh.Name, 30*time.Second)
	t.Logf("mesh pod running %.1fs after the agent was Ready again", time.Since(back).Seconds())
	cluster.LogShows(t, ns, mesh.Name, "app", 30*time.Second,
		"app dial "+unreachable+": proxy captured on :15001 original dst "+unreachable)
}

// evictedSoon gives p 5 s of toleration for its node being not ready or
// unreachable instead of the default 300 s, so a node the lifecycle
// controller taints would see it evicted within the test.
func evictedSoon(p *corev1.Pod) *corev1.Pod {
	five := int64(5)
	for _, key := range []string{corev1.TaintNodeNotReady, corev1.TaintNodeUnreachable} {
		p.Spec.Tolerations = append(p.Spec.Tolerations, corev1.Toleration{Key: key, Operator: corev1.TolerationOpExists,
			Effect: corev1.TaintEffectNoExecute, TolerationSeconds: &five})
	}
	return p
}

// sandboxRefused is nil once the kubelet reports the pod's sandbox failed
// in the sluice plugin.
func sandboxRefused(t *testing.T, ns, pod string) error {
	evs, err := client(t).CoreV1().Events(ns).List(t.Context(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + pod})
	if err != nil {
		return err
	}
	for _, e := range evs.Items {
		if e.Reason == "FailedCreatePodSandBox" && strings.Contains(e.Message, "sluice") {
			return nil
		}
	}
	return fmt.Errorf("no FailedCreatePodSandBox naming sluice; pod %s", nodetest.PodState(cluster.GetPod(t, ns, pod)))
}

// A DaemonSet that no longer selects the node is leaving it: the agent's
// SIGTERM removes the conflist entry (as Istio's agent does), so pods on
// the node start without sluice instead of waiting for an agent that will
// never come. Selecting the node again brings the agent and the entry back.
func TestAgentLeavesUnselectedNode(t *testing.T) {
	requireAgent(t)
	const away = "sluice.test/elsewhere"
	setAgentNodeSelector(t, away, "true")
	restored := false
	t.Cleanup(func() {
		if !restored {
			setAgentNodeSelector(t, away, "")
			readyAgent(t, 2*time.Minute)
		}
	})
	nodetest.Eventually(t, time.Minute, "no agent pod", func() error {
		if n := len(agentPods(t)); n != 0 {
			return fmt.Errorf("%d agent pods", n)
		}
		return nil
	})
	nodetest.Eventually(t, 30*time.Second, "the sluice entry removed", func() error {
		if types := cluster.RuntimeConflistTypes(t); slices.Contains(types, "sluice") {
			return fmt.Errorf("conflist plugins %v", types)
		}
		return nil
	})
	setAgentNodeSelector(t, away, "")
	restored = true
	readyAgent(t, 2*time.Minute)
	nodetest.Eventually(t, 30*time.Second, "the sluice entry back", func() error {
		if types := cluster.RuntimeConflistTypes(t); types[len(types)-1] != "sluice" {
			return fmt.Errorf("conflist plugins %v", types)
		}
		return nil
	})
}
