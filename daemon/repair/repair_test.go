package repair

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/sluicemesh/sluice/daemon/events"
	"github.com/sluicemesh/sluice/daemon/workloads"
	"github.com/sluicemesh/sluice/internal/kubetest"
	"github.com/sluicemesh/sluice/internal/nstest"
)

// A pod running before repair starts, uncaptured, gets its rules within
// seconds, found by its cgroup or, failing that, by its IP.
func TestApplyRepairsPodsRunningAtStart(t *testing.T) {
	for _, tc := range []struct {
		name     string
		inCgroup bool
	}{{"by cgroup", true}, {"by IP", false}} {
		t.Run(tc.name, func(t *testing.T) {
			a := startAgentParts(t)
			_, admin := kube(t)
			ns := namespace(t, admin)
			ip := nstest.TestIP(t)
			pod := setRunning(t, admin, a.createPod(t, admin, ns, "early", true), ip)
			sb := sandbox(t, string(pod.UID), ip, tc.inCgroup)

			r, _ := a.runRepair(t, ModeApply)
			rec := waitEnrolled(t, a, pod)
			if rec.ContainerID != LateContainerID(string(pod.UID)) || rec.IfName != "eth0" ||
				!strings.HasPrefix(rec.Netns, "/proc/") || len(rec.IPs) != 1 || rec.IPs[0].String() != ip.String()+"/32" {
				t.Errorf("late record %+v: want container %s, eth0, a /proc netns, IPs [%s/32]", rec, LateContainerID(string(pod.UID)), ip)
			}
			if out := sb.Run(t, "nft", "list", "table", "inet", "sluice"); !strings.Contains(out, "15001") {
				t.Errorf("the pod's netns has no outbound redirect:\n%s", out)
			}
			ev := kubetest.WaitPodEvent(t, admin, pod, events.ReasonCaptureRepaired)
			if ev.Type != corev1.EventTypeNormal || !strings.Contains(ev.Message, "not ready or not running") {
				t.Errorf("event %s %q: want Normal, saying why the pod was uncaptured", ev.Type, ev.Message)
			}
			if got := r.Repairs(); got[OutcomeApplied] != 1 || got[OutcomeFailed] != 0 {
				t.Errorf("Repairs = %v, want one applied", got)
			}
		})
	}
}

// A pod that gets its IP after repair started is repaired on that update.
func TestApplyRepairsPodOnUpdate(t *testing.T) {
	a := startAgentParts(t)
	_, admin := kube(t)
	ns := namespace(t, admin)
	ip := nstest.TestIP(t)
	pod := a.createPod(t, admin, ns, "later", true)
	sb := sandbox(t, string(pod.UID), ip, true)
	r, _ := a.runRepair(t, ModeApply)
	waitSwept(t, r)
	if _, ok := enrolledAs(a.store, string(pod.UID)); ok {
		t.Fatal("a pod with no IP yet (its ADD may be running) was enrolled")
	}

	pod = setRunning(t, admin, pod, ip)
	waitEnrolled(t, a, pod)
	sb.Run(t, "nft", "list", "table", "inet", "sluice")
	kubetest.WaitPodEvent(t, admin, pod, events.ReasonCaptureRepaired)
}

// label mode marks the pod and records a warning; it programs nothing.
func TestLabelMarksUncapturedPod(t *testing.T) {
	a := startAgentParts(t)
	_, admin := kube(t)
	ns := namespace(t, admin)
	ip := nstest.TestIP(t)
	pod := setRunning(t, admin, a.createPod(t, admin, ns, "marked", true), ip)
	sandbox(t, string(pod.UID), ip, true)
	r, _ := a.runRepair(t, ModeLabel)

	nstest.Eventually(t, 5*time.Second, func() bool {
		p, err := admin.CoreV1().Pods(ns).Get(context.Background(), pod.Name, metav1.GetOptions{})
		return err == nil && p.Labels[LabelUncaptured] == "true"
	}, "pod never labelled %s=true", LabelUncaptured)
	ev := kubetest.WaitPodEvent(t, admin, pod, events.ReasonUncaptured)
	if ev.Type != corev1.EventTypeWarning || !strings.Contains(ev.Message, LabelUncaptured) {
		t.Errorf("event %s %q: want a Warning naming the label", ev.Type, ev.Message)
	}
	if _, ok := enrolledAs(a.store, string(pod.UID)); ok {
		t.Error("label mode enrolled the pod")
	}
	if got := r.Repairs(); got[OutcomeLabelled] != 1 {
		t.Errorf("Repairs = %v, want one labelled", got)
	}
	// The label's own update comes back through the watch; it must not
	// label (or record) a second time.
	waitCount(t, admin, pod, events.ReasonUncaptured, 1)
}

// delete mode evicts the pod, then records why (no kubelet runs here, so
// "evicted" is a deletion timestamp, or gone).
func TestDeleteEvictsUncapturedPod(t *testing.T) {
	a := startAgentParts(t)
	_, admin := kube(t)
	ns := namespace(t, admin)
	ip := nstest.TestIP(t)
	pod := setRunning(t, admin, a.createPod(t, admin, ns, "evicted", true), ip)
	r, _ := a.runRepair(t, ModeDelete)

	nstest.Eventually(t, 5*time.Second, func() bool {
		p, err := admin.CoreV1().Pods(ns).Get(context.Background(), pod.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err) || err == nil && p.DeletionTimestamp != nil
	}, "pod never deleted")
	ev := kubetest.WaitPodEvent(t, admin, pod, events.ReasonUncapturedDeleted)
	if ev.Type != corev1.EventTypeWarning {
		t.Errorf("event type %s, want Warning", ev.Type)
	}
	nstest.Eventually(t, 5*time.Second, func() bool { return r.Repairs()[OutcomeEvicted] == 1 },
		"Repairs = %v, want one evicted", r.Repairs())
	// The eviction's own pod update (DisruptionTarget) must not evict again.
	waitCount(t, admin, pod, events.ReasonUncapturedDeleted, 1)
	if got := r.Repairs(); got[OutcomeEvicted] != 1 {
		t.Errorf("Repairs = %v, want exactly one evicted", got)
	}
}

// A running pod policy passes through (not injected) is left alone.
func TestPassedThroughPodIsLeftAlone(t *testing.T) {
	a := startAgentParts(t)
	_, admin := kube(t)
	ns := namespace(t, admin)
	ip := nstest.TestIP(t)
	plain := setRunning(t, admin, a.createPod(t, admin, ns, "plain", false), ip)
	sb := sandbox(t, string(plain.UID), ip, true)
	r, checked := a.runRepair(t, ModeApply)

	waitChecked(t, checked, ns+"/plain")
	if got := r.Repairs(); len(got) != 0 {
		t.Errorf("Repairs = %v for a pod policy passes through, want none", got)
	}
	if _, ok := enrolledAs(a.store, string(plain.UID)); ok {
		t.Error("a pod policy passes through was enrolled")
	}
	if out, err := sb.Command("nft", "list", "table", "inet", "sluice").CombinedOutput(); err == nil {
		t.Errorf("a pod policy passes through got rules:\n%s", out)
	}
	if evs := podEvents(t, admin, plain); len(evs) != 0 {
		t.Errorf("events on a pod left alone: %v", evs)
	}
}

// A pod whose repair fails gets a warning once, is not retried in a loop,
// and is retried once per later update.
func TestFailedRepairRetriesOnlyOnUpdate(t *testing.T) {
	a := startAgentParts(t)
	_, admin := kube(t)
	ns := namespace(t, admin)
	// Running, but no process of it exists on this machine: no netns.
	pod := setRunning(t, admin, a.createPod(t, admin, ns, "ghost", true), nstest.TestIP(t))
	r, checked := a.runRepair(t, ModeApply)

	waitChecked(t, checked, ns+"/ghost")
	ev := kubetest.WaitPodEvent(t, admin, pod, events.ReasonCaptureRepairFailed)
	if ev.Type != corev1.EventTypeWarning || !strings.Contains(ev.Message, "pod"+string(pod.UID)) {
		t.Errorf("event %s %q: want a Warning saying what was looked for", ev.Type, ev.Message)
	}
	if got := r.Repairs(); got[OutcomeFailed] != 1 {
		t.Errorf("Repairs = %v after the first try, want one failed", got)
	}

	patch := []byte(`{"metadata":{"annotations":{"touched":"1"}}}`)
	if _, err := admin.CoreV1().Pods(ns).Patch(context.Background(), pod.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitChecked(t, checked, ns+"/ghost")
	nstest.Eventually(t, 5*time.Second, func() bool { return r.Repairs()[OutcomeFailed] == 2 },
		"the update did not retry the repair: %v", r.Repairs())
	waitCount(t, admin, pod, events.ReasonCaptureRepairFailed, 2)
}

func waitEnrolled(t *testing.T, a *agentParts, pod *corev1.Pod) (rec workloads.Record) {
	t.Helper()
	nstest.Eventually(t, 5*time.Second, func() bool {
		var ok bool
		rec, ok = enrolledAs(a.store, string(pod.UID))
		return ok
	}, "pod %s/%s never enrolled", pod.Namespace, pod.Name)
	return rec
}

func waitSwept(t *testing.T, r *Repairer) {
	t.Helper()
	select {
	case <-r.swept:
	case <-time.After(30 * time.Second):
		t.Fatal("repair never finished its sweep at start")
	}
}

func waitChecked(t *testing.T, checked <-chan string, key string) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case k := <-checked:
			if k == key {
				return
			}
		case <-deadline:
			t.Fatalf("repair never checked %s", key)
		}
	}
}

func podEvents(t *testing.T, c kubernetes.Interface, p *corev1.Pod) []string {
	t.Helper()
	l, err := c.CoreV1().Events(p.Namespace).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, ev := range l.Items {
		if ev.InvolvedObject.UID == p.UID {
			out = append(out, ev.Reason+"×"+strconv.Itoa(int(ev.Count)))
		}
	}
	return out
}

// waitCount waits until the pod's events with reason add up to n, and
// fails if they go past it. The recorder counts repeats on one Event.
func waitCount(t *testing.T, c kubernetes.Interface, p *corev1.Pod, reason string, n int32) {
	t.Helper()
	count := func() int32 {
		l, err := c.CoreV1().Events(p.Namespace).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return -1
		}
		var sum int32
		for _, ev := range l.Items {
			if ev.InvolvedObject.UID == p.UID && ev.Reason == reason {
				sum += ev.Count
			}
		}
		return sum
	}
	nstest.Eventually(t, 10*time.Second, func() bool { return count() >= n }, "fewer than %d %s events", n, reason)
	if got := count(); got != n {
		t.Errorf("%d %s events, want %d", got, reason, n)
	}
}
