package peer

import (
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluicemesh/sluice/test/harness/lifecycletest"
	"github.com/sluicemesh/sluice/test/harness/nodetest"
)

// The same outage test/node's TestAgentOutage gives sluice (a failed
// upgrade: the DaemonSet's pod replaced by one whose image is not there),
// measured on istio-cni in sidecar mode. istio-cni's plugin has no STATUS
// and needs no agent, so the node stays Ready and untainted, a killed
// container restarts and an excluded pod starts, as with sluice; an
// uninjected pod starts too (sluice's waits for the agent). But the
// old install-cni's SIGTERM removes istio-cni from the conflist (it keeps
// its entry only in ambient mode), so a sidecar pod created during the
// outage gets a netns with no redirection: its istio-validation init
// container finds that and fails (exit 126), so the app never runs
// uncaptured, and the pod crash-loops until the agent is back, when
// install-cni's repair controller deletes it (delete mode, see
// requireAgent) for its owner to create again. sluice's new mesh pod
// waits in sandbox creation and starts captured within seconds of the
// agent's return, the same pod.
func TestIstioCNIAgentOutage(t *testing.T) {
	requireAgent(t)
	ns := namespace(t)
	readyAgent(t, time.Minute)
	running := cluster.RunningPod(t, ns, cluster.CreatePod(t, ns, sidecarPod("running", unreachable)).Name, time.Minute)
	if err := captured(podRules(t, running)); err != nil {
		t.Fatalf("pod started before the outage: %v", err)
	}

	// This node's install-cni only: a rolling update to the absent image
	// could take the other node's first and stall there.
	restore := lifecycletest.DaemonSetOutage(t, cluster, releaseNS, agentDS, "install-cni", "localhost/istio-absent:outage", cluster.NodeName)
	watch := nodetest.WatchNode(t, client(t), cluster.NodeName)
	if types := cluster.RuntimeConflistTypes(t); slices.Contains(types, "istio-cni") {
		t.Fatalf("conflist plugins with istio-cni away = %v: measured before, its SIGTERM removed the entry", types)
	}

	cluster.KillPodContainer(t, running, "app")
	excluded := cluster.CreatePod(t, excludedNS, plainPod(fmt.Sprintf("outage-excluded-%d", seq.Add(1)), unreachable))
	t.Cleanup(func() { cluster.DeletePod(excludedNS, excluded.Name) })
	mesh := cluster.CreatePod(t, ns, sidecarPod("during-outage", unreachable))
	plain := cluster.CreatePod(t, ns, plainPod("plain-during-outage", unreachable))

	watch.Eventually(t, time.Minute, "the killed container restarted", func() error {
		return nodetest.Restarted(cluster.GetPod(t, ns, running.Name), "app")
	})
	t.Logf("killed container running again %.1fs into the outage", watch.Elapsed().Seconds())
	watch.Eventually(t, time.Minute, "the excluded pod running", func() error {
		return nodetest.IsRunning(cluster.GetPod(t, excludedNS, excluded.Name))
	})
	t.Logf("excluded pod running %.1fs into the outage", watch.Elapsed().Seconds())
	watch.Eventually(t, time.Minute, "the uninjected pod running", func() error {
		return nodetest.IsRunning(cluster.GetPod(t, ns, plain.Name))
	})
	t.Logf("uninjected pod running %.1fs into the outage", watch.Elapsed().Seconds())
	watch.Eventually(t, time.Minute, "istio-validation refusing the sidecar pod created during the outage", func() error {
		return validationFailed(cluster.GetPod(t, ns, mesh.Name))
	})
	t.Logf("sidecar pod created during the outage refused by istio-validation %.1fs into it", watch.Elapsed().Seconds())
	if err := captured(podRules(t, cluster.GetPod(t, ns, running.Name))); err != nil {
		t.Fatalf("pod started before the outage, after its container's restart: %v", err)
	}
	watch.Held(t, 15*time.Second)
	if p := cluster.GetPod(t, ns, mesh.Name); appStarted(p) {
		t.Fatalf("the outage's sidecar pod ran its app with no agent: %s", nodetest.PodState(p))
	}

	restore(t)
	readyAgent(t, 2*time.Minute)
	back := time.Now()
	// The repair controller deletes the crash-looping pod; its owner (here
	// none) would create it again, through the plugin now in place.
	nodetest.Eventually(t, time.Minute, "the refused pod deleted by istio-cni's repair", func() error {
		if _, err := client(t).CoreV1().Pods(ns).Get(t.Context(), mesh.Name, metav1.GetOptions{}); err == nil {
			return fmt.Errorf("pod %s still there", mesh.Name)
		}
		return nil
	})
	t.Logf("the refused pod deleted %.1fs after istio-cni was Ready again", time.Since(back).Seconds())
	again := cluster.RunningPod(t, ns, cluster.CreatePod(t, ns, sidecarPod("after-outage", unreachable)).Name, time.Minute)
	t.Logf("a new sidecar pod running %.1fs after istio-cni was Ready again", time.Since(back).Seconds())
	if err := captured(podRules(t, again)); err != nil {
		t.Fatalf("sidecar pod created after the agent's return: %v", err)
	}
	cluster.LogShows(t, ns, again.Name, "app", 30*time.Second,
		"app dial "+unreachable+": proxy captured on :15001 original dst "+unreachable)
}

// validationFailed is nil once the pod's istio-validation init container
// has exited with Istio's validation error code.
func validationFailed(p *corev1.Pod) error {
	for _, cs := range p.Status.InitContainerStatuses {
		if cs.Name != "istio-validation" {
			continue
		}
		for _, st := range []*corev1.ContainerStateTerminated{cs.State.Terminated, cs.LastTerminationState.Terminated} {
			if st != nil && st.ExitCode == validationErrorCode {
				return nil
			}
		}
	}
	return fmt.Errorf("istio-validation has not failed: %s", nodetest.PodState(p))
}

// validationErrorCode is the exit code of a failed istio-validation
// (Istio's iptables.ValidationErrorCode), which the repair controller
// looks for.
const validationErrorCode = 126

// appStarted is true if the pod's app container has ever run.
func appStarted(p *corev1.Pod) bool {
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name == "app" && (cs.State.Running != nil || cs.State.Terminated != nil || cs.RestartCount > 0) {
			return true
		}
	}
	return false
}
