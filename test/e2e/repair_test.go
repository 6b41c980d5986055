package e2e

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/sluicemesh/sluice/test/harness/kubetest"
	"github.com/sluicemesh/sluice/test/harness/nstest"
	"github.com/sluicemesh/sluice/test/harness/podtest"
)

// These tests need the agent to run daemon/podcheck and daemon/events
// (wired in daemon/main.go). Late enrollment finds a pod's netns through
// /proc/<pid>/ns/net, so /proc joins the test's netns roots.

// A pod that was running before the agent started, uncaptured, gets its
// rules from the agent at start (--repair-mode=apply, the default), with
// an Event saying so; Debug shows the late workload in sync.
func TestRepairAppliesToPodRunningBeforeAgent(t *testing.T) {
	env, c := sharedKube(t)
	createNamespace(t, c, "early")
	n := newNode(t)
	ip := nstest.TestIP(t)
	pod := runningPod(t, c, "early", sidecarPod("early", nil), ip)
	sb := n.podSandbox(t, "early", pod, ip)

	start := time.Now()
	n.kubeAgent(env, "--netns-roots", n.Root+",/proc", "--host-proc", "/proc")
	id := "late-" + string(pod.UID)
	// The promise: rules within 5 s of the agent's start.
	nstest.Eventually(t, 5*time.Second-time.Since(start), func() bool {
		for _, w := range n.Workloads(t) {
			if w.ContainerId == id {
				return true
			}
		}
		return false
	}, "the agent never enrolled the pod running before it:\n%s", n.agent.Logs)
	n.expectInSync(t, id)
	if out := sb.Run(t, "nft", "list", "table", "inet", "sluice"); !strings.Contains(out, "15001") {
		t.Errorf("the pod's netns has no outbound redirect:\n%s", out)
	}
	ev := kubetest.WaitPodEvent(t, c, pod, "CaptureRepaired")
	if ev.Type != corev1.EventTypeNormal {
		t.Errorf("CaptureRepaired is %s, want Normal", ev.Type)
	}
}

// --repair-mode=label marks an uncaptured pod and leaves its netns alone.
func TestRepairLabelsUncapturedPod(t *testing.T) {
	env, c := sharedKube(t)
	createNamespace(t, c, "marked")
	n := newNode(t)
	ip := nstest.TestIP(t)
	pod := runningPod(t, c, "marked", sidecarPod("marked", nil), ip)
	sb := n.podSandbox(t, "marked", pod, ip)

	n.kubeAgent(env, "--repair-mode", "label")
	nstest.Eventually(t, 10*time.Second, func() bool {
		p, err := c.CoreV1().Pods("marked").Get(context.Background(), "marked", metav1.GetOptions{})
		return err == nil && p.Labels["sluice.dev/uncaptured"] == "true"
	}, "the agent never labelled the uncaptured pod:\n%s", n.agent.Logs)
	if ev := kubetest.WaitPodEvent(t, c, pod, "Uncaptured"); ev.Type != corev1.EventTypeWarning {
		t.Errorf("Uncaptured is %s, want Warning", ev.Type)
	}
	if s := rulesetState(t, sb); s != "none" {
		t.Errorf("label mode programmed the pod: %s", s)
	}
}

// --repair-mode=delete deletes an uncaptured pod so its owner recreates it
// through the plugin. No kubelet runs here: deleted means terminating.
func TestRepairDeletesUncapturedPod(t *testing.T) {
	env, c := sharedKube(t)
	createNamespace(t, c, "evicted")
	n := newNode(t)
	pod := runningPod(t, c, "evicted", sidecarPod("evicted", nil), nstest.TestIP(t))

	n.kubeAgent(env, "--repair-mode", "delete")
	nstest.Eventually(t, 10*time.Second, func() bool {
		p, err := c.CoreV1().Pods("evicted").Get(context.Background(), "evicted", metav1.GetOptions{})
		return apierrors.IsNotFound(err) || err == nil && p.DeletionTimestamp != nil
	}, "the agent never deleted the uncaptured pod:\n%s", n.agent.Logs)
	kubetest.WaitPodEvent(t, c, pod, "UncapturedDeleted")
}

// A failed ADD leaves a CaptureFailed warning on the pod, where its owner
// looks, not only in the kubelet's log.
func TestCaptureFailureRecordedOnPod(t *testing.T) {
	env, c := sharedKube(t)
	createNamespace(t, c, "failing")
	n := newNode(t)
	n.kubeAgent(env)
	cni := n.cni(n.loopbackChain("5s"))
	bad := podtest.Create(t, c, "failing", sidecarPod("bad", map[string]string{
		"traffic.sidecar.istio.io/excludeOutboundIPRanges": "10.0.0.0/33",
	}))
	if _, err := cni.Add(rtFor("bad1", n.Pod("bad"), bad)); err == nil {
		t.Fatal("ADD with an invalid annotation succeeded")
	}
	ev := kubetest.WaitPodEvent(t, c, bad, "CaptureFailed")
	if ev.Type != corev1.EventTypeWarning || !strings.Contains(ev.Message, "10.0.0.0/33") {
		t.Errorf("CaptureFailed event %s %q: want a Warning naming the bad value", ev.Type, ev.Message)
	}
}

// runningPod creates p in ns with the status a kubelet writes once the
// sandbox is up, and deletes it when the test ends, so agents of later
// tests on the same node do not find it.
func runningPod(t *testing.T, c kubernetes.Interface, ns string, p *corev1.Pod, ip netip.Addr) *corev1.Pod {
	t.Helper()
	p = podtest.Create(t, c, ns, p)
	t.Cleanup(func() {
		zero := int64(0)
		c.CoreV1().Pods(ns).Delete(context.Background(), p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	})
	p.Status.Phase = corev1.PodRunning
	p.Status.PodIP = ip.String()
	p.Status.PodIPs = []corev1.PodIP{{IP: ip.String()}}
	got, err := c.CoreV1().Pods(ns).UpdateStatus(context.Background(), p, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("set pod %s/%s running: %v", ns, p.Name, err)
	}
	return got
}

// podSandbox is what a runtime leaves for a running pod (podtest.SandboxIn):
// a netns under the node's root with the pod's IP, and a process in it
// placed in a cgroup naming the pod, as the kubelet's cgroupfs driver does.
func (n *node) podSandbox(t *testing.T, name string, pod *corev1.Pod, ip netip.Addr) *nstest.NS {
	t.Helper()
	return podtest.SandboxIn(t, n.Pod(name), string(pod.UID), ip, true)
}
