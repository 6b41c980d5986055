package node

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
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
	if _, err := client(t).AppsV1().DaemonSets(releaseNS).Patch(t.Context(), release+"-agent", types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("patch the agent DaemonSet's nodeSelector: %v", err)
	}
}

// setAgentImage replaces the agent's image, through a rolling update; an
// image that is not on the node (pull policy Never) leaves the node with no
// agent while the DaemonSet still selects it, as a failed upgrade does.
func setAgentImage(t *testing.T, image string) {
	t.Helper()
	patch := []byte(`{"spec":{"template":{"spec":{"containers":[{"name":"sluice-agent","image":"` + image + `"}]}}}}`)
	if _, err := client(t).AppsV1().DaemonSets(releaseNS).Patch(t.Context(), release+"-agent", types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("patch the agent DaemonSet's image: %v", err)
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

// While the node has no agent, new pods fail closed: their sandbox does
// not start, the conflist entry stays, and the kubelet says the agent is
// not there. Once a new agent is Ready they start, captured.
func TestAgentOutage(t *testing.T) {
	requireAgent(t)
	ns := namespace(t, nil)
	image := readyAgent(t, time.Minute).Spec.Containers[0].Image
	// A failed upgrade: the agent's pod is replaced by one whose image is
	// not there, and the DaemonSet still selects the node.
	setAgentImage(t, "sluice-absent:outage")
	restored := false
	t.Cleanup(func() {
		if !restored {
			setAgentImage(t, image)
		}
	})
	eventually(t, time.Minute, "no agent running", func() error { return noRunningAgent(t) })
	if types := conflistTypes(t); types[len(types)-1] != "sluice" {
		t.Fatalf("conflist plugins with the agent away = %v, want the sluice entry kept", types)
	}

	p := createPod(t, ns, sidecarPod("during-outage", unreachable, nil))
	eventually(t, time.Minute, "the sandbox refused for want of an agent", func() error {
		evs, err := client(t).CoreV1().Events(ns).List(t.Context(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + p.Name})
		if err != nil {
			return err
		}
		for _, e := range evs.Items {
			if e.Reason == "FailedCreatePodSandBox" && strings.Contains(e.Message, "sluice") {
				return nil
			}
		}
		return fmt.Errorf("no FailedCreatePodSandBox naming sluice; pod %s", podState(getPod(t, ns, p.Name)))
	})
	if got := getPod(t, ns, p.Name); got.Status.Phase != corev1.PodPending {
		t.Fatalf("pod created with no agent: %s, want Pending", podState(got))
	}

	setAgentImage(t, image)
	restored = true
	readyAgent(t, 2*time.Minute)
	// The kubelet retries a failed sandbox after its pod worker's backoff
	// (10 s); the pod then starts through the new agent, captured.
	runningPod(t, ns, p.Name, time.Minute)
	logShows(t, ns, p.Name, "app", 30*time.Second,
		"app dial "+unreachable+": proxy captured on :15001 original dst "+unreachable)
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
	eventually(t, time.Minute, "no agent pod", func() error {
		if n := len(agentPods(t)); n != 0 {
			return fmt.Errorf("%d agent pods", n)
		}
		return nil
	})
	eventually(t, 30*time.Second, "the sluice entry removed", func() error {
		if types := conflistTypes(t); slices.Contains(types, "sluice") {
			return fmt.Errorf("conflist plugins %v", types)
		}
		return nil
	})
	setAgentNodeSelector(t, away, "")
	restored = true
	readyAgent(t, 2*time.Minute)
	eventually(t, 30*time.Second, "the sluice entry back", func() error {
		if types := conflistTypes(t); types[len(types)-1] != "sluice" {
			return fmt.Errorf("conflist plugins %v", types)
		}
		return nil
	})
}
