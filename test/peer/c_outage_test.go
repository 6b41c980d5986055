package peer

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
)

// setAgentImage replaces install-cni's image through a rolling update; an
// image that is not on the node (pull policy Never) leaves the node with no
// agent while the DaemonSet still selects it, as a failed upgrade does.
func setAgentImage(t *testing.T, image string) {
	t.Helper()
	patch := []byte(`{"spec":{"template":{"spec":{"containers":[{"name":"install-cni","image":"` + image + `"}]}}}}`)
	if _, err := client(t).AppsV1().DaemonSets(releaseNS).Patch(context.Background(), agentDS, types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("patch the istio-cni DaemonSet's image: %v", err)
	}
}

// noRunningAgent is nil when no install-cni container runs on the node.
func noRunningAgent(t *testing.T) error {
	for _, p := range agentPods(t) {
		for _, c := range p.Status.ContainerStatuses {
			if c.State.Running != nil {
				return fmt.Errorf("istio-cni pod %s runs", p.Name)
			}
		}
	}
	return nil
}

// The same outage test/node's TestAgentOutage gives sluice (a failed
// upgrade: the DaemonSet's pod replaced by one whose image is not there),
// measured on istio-cni in sidecar mode. istio-cni's plugin has no STATUS
// and needs no agent, so the node stays Ready and untainted, a killed
// container restarts and an excluded pod starts, as with sluice. But the
// old install-cni's SIGTERM removes istio-cni from the conflist (it keeps
// its entry only in ambient mode, when the DaemonSet still selects the
// node), so a sidecar pod created during the outage starts with no
// redirection at all, and stays so after the agent's return: Istio leaves
// it to the istio-validation init container to refuse such a pod and to
// the repair controller to act on that refusal. sluice's new mesh pod
// waits and starts captured.
func TestIstioCNIAgentOutage(t *testing.T) {
	requireAgent(t)
	ns := namespace(t)
	image := readyAgent(t, time.Minute).Spec.Containers[0].Image
	running := runningPod(t, ns, createPod(t, ns, sidecarPod("running", unreachable)).Name, time.Minute)
	if err := captured(podRules(t, running)); err != nil {
		t.Fatalf("pod started before the outage: %v", err)
	}

	setAgentImage(t, "localhost/istio-absent:outage")
	restored := false
	t.Cleanup(func() {
		if !restored {
			setAgentImage(t, image)
		}
	})
	eventually(t, time.Minute, "no istio-cni running", func() error { return noRunningAgent(t) })
	watch := watchNode(t, cluster.NodeName)
	if types := conflistTypes(t); slices.Contains(types, "istio-cni") {
		t.Fatalf("conflist plugins with istio-cni away = %v: measured before, its SIGTERM removed the entry", types)
	}

	killContainer(t, running, "app")
	excluded := createPod(t, excludedNS, plainPod(fmt.Sprintf("outage-excluded-%d", seq.Add(1)), unreachable))
	t.Cleanup(func() { deletePod(excludedNS, excluded.Name) })
	mesh := createPod(t, ns, sidecarPod("during-outage", unreachable))

	whileHeld(t, watch, time.Minute, "the killed container restarted", func() error {
		return restarted(getPod(t, ns, running.Name), "app")
	})
	t.Logf("killed container running again %.1fs into the outage", time.Since(watch.start).Seconds())
	whileHeld(t, watch, time.Minute, "the excluded pod running", func() error {
		return isRunning(getPod(t, excludedNS, excluded.Name))
	})
	t.Logf("excluded pod running %.1fs into the outage", time.Since(watch.start).Seconds())
	whileHeld(t, watch, time.Minute, "the sidecar pod created during the outage running", func() error {
		return isRunning(getPod(t, ns, mesh.Name))
	})
	t.Logf("sidecar pod created during the outage running %.1fs into it", time.Since(watch.start).Seconds())
	mesh = getPod(t, ns, mesh.Name)
	if rules := podRules(t, mesh); strings.Contains(rules, "ISTIO") {
		t.Fatalf("sidecar pod created during the outage has Istio rules (measured before: none):\n%s", rules)
	}
	if err := captured(podRules(t, getPod(t, ns, running.Name))); err != nil {
		t.Fatalf("pod started before the outage, after its container's restart: %v", err)
	}
	watch.held(t, 15*time.Second)

	setAgentImage(t, image)
	restored = true
	readyAgent(t, 2*time.Minute)
	after := runningPod(t, ns, createPod(t, ns, sidecarPod("after-outage", unreachable)).Name, time.Minute)
	if err := captured(podRules(t, after)); err != nil {
		t.Fatalf("sidecar pod created after the agent's return: %v", err)
	}
	if rules := podRules(t, getPod(t, ns, mesh.Name)); strings.Contains(rules, "ISTIO") {
		t.Fatalf("the outage's uncaptured pod was repaired (measured before: never):\n%s", rules)
	}
	logShows(t, ns, mesh.Name, "app", 10*time.Second, "app dial "+unreachable+":")
	if l := logs(t, ns, mesh.Name, "app"); strings.Contains(l, "proxy captured") {
		t.Fatalf("the outage's pod's traffic reached the proxy:\n%s", l)
	}
}

// whileHeld is eventually, failing at once if the node watch has seen the
// node NotReady or tainted.
func whileHeld(t *testing.T, w *nodeWatch, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	eventually(t, timeout, what, func() error {
		if err := w.err(); err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		return cond()
	})
}

// killContainer SIGKILLs the pod's container through the node's runtime.
func killContainer(t *testing.T, p *corev1.Pod, name string) {
	t.Helper()
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name == name {
			if err := cluster.KillContainer(t.Context(), cs.ContainerID); err != nil {
				t.Fatal(err)
			}
			return
		}
	}
	t.Fatalf("pod %s/%s has no container %s: %s", p.Namespace, p.Name, name, podState(p))
}

// restarted is nil once the container has been restarted and runs.
func restarted(p *corev1.Pod, name string) error {
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name == name && cs.RestartCount > 0 && cs.State.Running != nil {
			return nil
		}
	}
	return fmt.Errorf("container %s not restarted: %s", name, podState(p))
}
