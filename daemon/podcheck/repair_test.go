package podcheck

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sluicemesh/sluice/daemon/events"
	"github.com/sluicemesh/sluice/daemon/late"
	"github.com/sluicemesh/sluice/daemon/repair"
	"github.com/sluicemesh/sluice/test/harness/kubetest"
	"github.com/sluicemesh/sluice/test/harness/nstest"
	"github.com/sluicemesh/sluice/test/harness/podtest"
)

// A pod running before repair starts, uncaptured, gets its rules within
// seconds, found by its cgroup or, failing that, by its IP.
func TestApplyRepairsPodsRunningAtStart(t *testing.T) {
	for _, tc := range []struct {
		name     string
		inCgroup bool
	}{{"by cgroup", true}, {"by IP", false}} {
		t.Run(tc.name, func(t *testing.T) {
			a := podtest.Start(t)
			_, admin := podtest.Kube(t)
			ns := podtest.Namespace(t, admin)
			ip := nstest.TestIP(t)
			pod := podtest.SetRunning(t, admin, a.CreatePod(t, admin, ns, "early", true), ip)
			sb := podtest.Sandbox(t, string(pod.UID), ip, tc.inCgroup)

			r, _ := runRepair(t, a, repair.ModeApply)
			rec := a.WaitEnrolled(t, pod)
			if rec.ContainerID != late.ContainerID(string(pod.UID)) || rec.IfName != "eth0" ||
				!strings.HasPrefix(rec.Netns, "/proc/") || len(rec.IPs) != 1 || rec.IPs[0].String() != ip.String()+"/32" {
				t.Errorf("late record %+v: want container %s, eth0, a /proc netns, IPs [%s/32]", rec, late.ContainerID(string(pod.UID)), ip)
			}
			if out := sb.Run(t, "nft", "list", "table", "inet", "sluice"); !strings.Contains(out, "15001") {
				t.Errorf("the pod's netns has no outbound redirect:\n%s", out)
			}
			ev := kubetest.WaitPodEvent(t, admin, pod, events.ReasonCaptureRepaired)
			if ev.Type != corev1.EventTypeNormal || !strings.Contains(ev.Message, "not ready or not running") {
				t.Errorf("event %s %q: want Normal, saying why the pod was uncaptured", ev.Type, ev.Message)
			}
			if got := r.Counts(); got[repair.OutcomeApplied] != 1 || got[OutcomeFailed] != 0 {
				t.Errorf("Counts = %v, want one applied", got)
			}
		})
	}
}

// A pod that gets its IP after repair started is repaired on that update.
func TestApplyRepairsPodOnUpdate(t *testing.T) {
	a := podtest.Start(t)
	_, admin := podtest.Kube(t)
	ns := podtest.Namespace(t, admin)
	ip := nstest.TestIP(t)
	pod := a.CreatePod(t, admin, ns, "later", true)
	sb := podtest.Sandbox(t, string(pod.UID), ip, true)
	r, _ := runRepair(t, a, repair.ModeApply)
	waitSwept(t, r)
	if _, ok := podtest.EnrolledAs(a.Store, string(pod.UID)); ok {
		t.Fatal("a pod with no IP yet (its ADD may be running) was enrolled")
	}

	pod = podtest.SetRunning(t, admin, pod, ip)
	a.WaitEnrolled(t, pod)
	sb.Run(t, "nft", "list", "table", "inet", "sluice")
	kubetest.WaitPodEvent(t, admin, pod, events.ReasonCaptureRepaired)
}

// label mode marks the pod and records a warning; it programs nothing.
func TestLabelMarksUncapturedPod(t *testing.T) {
	a := podtest.Start(t)
	_, admin := podtest.Kube(t)
	ns := podtest.Namespace(t, admin)
	ip := nstest.TestIP(t)
	pod := podtest.SetRunning(t, admin, a.CreatePod(t, admin, ns, "marked", true), ip)
	podtest.Sandbox(t, string(pod.UID), ip, true)
	r, _ := runRepair(t, a, repair.ModeLabel)

	nstest.Eventually(t, 5*time.Second, func() bool {
		p, err := admin.CoreV1().Pods(ns).Get(context.Background(), pod.Name, metav1.GetOptions{})
		return err == nil && p.Labels[repair.LabelUncaptured] == "true"
	}, "pod never labelled %s=true", repair.LabelUncaptured)
	ev := kubetest.WaitPodEvent(t, admin, pod, events.ReasonUncaptured)
	if ev.Type != corev1.EventTypeWarning || !strings.Contains(ev.Message, repair.LabelUncaptured) {
		t.Errorf("event %s %q: want a Warning naming the label", ev.Type, ev.Message)
	}
	if _, ok := podtest.EnrolledAs(a.Store, string(pod.UID)); ok {
		t.Error("label mode enrolled the pod")
	}
	if got := r.Counts(); got[repair.OutcomeLabelled] != 1 {
		t.Errorf("Counts = %v, want one labelled", got)
	}
	// The label's own update comes back through the watch; it must not
	// label (or record) a second time.
	podtest.WaitEventCount(t, admin, pod, events.ReasonUncaptured, 1)
}

// delete mode evicts the pod, then records why (no kubelet runs here, so
// "evicted" is a deletion timestamp, or gone).
func TestDeleteEvictsUncapturedPod(t *testing.T) {
	a := podtest.Start(t)
	_, admin := podtest.Kube(t)
	ns := podtest.Namespace(t, admin)
	ip := nstest.TestIP(t)
	pod := podtest.SetRunning(t, admin, a.CreatePod(t, admin, ns, "evicted", true), ip)
	r, _ := runRepair(t, a, repair.ModeDelete)

	nstest.Eventually(t, 5*time.Second, func() bool {
		p, err := admin.CoreV1().Pods(ns).Get(context.Background(), pod.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err) || err == nil && p.DeletionTimestamp != nil
	}, "pod never deleted")
	ev := kubetest.WaitPodEvent(t, admin, pod, events.ReasonUncapturedDeleted)
	if ev.Type != corev1.EventTypeWarning {
		t.Errorf("event type %s, want Warning", ev.Type)
	}
	nstest.Eventually(t, 5*time.Second, func() bool { return r.Counts()[repair.OutcomeEvicted] == 1 },
		"Counts = %v, want one evicted", r.Counts())
	// The eviction's own pod update (DisruptionTarget) must not evict again.
	podtest.WaitEventCount(t, admin, pod, events.ReasonUncapturedDeleted, 1)
	if got := r.Counts(); got[repair.OutcomeEvicted] != 1 {
		t.Errorf("Counts = %v, want exactly one evicted", got)
	}
}

// A running pod policy passes through (not injected) is left alone.
func TestPassedThroughPodIsLeftAlone(t *testing.T) {
	a := podtest.Start(t)
	_, admin := podtest.Kube(t)
	ns := podtest.Namespace(t, admin)
	ip := nstest.TestIP(t)
	plain := podtest.SetRunning(t, admin, a.CreatePod(t, admin, ns, "plain", false), ip)
	sb := podtest.Sandbox(t, string(plain.UID), ip, true)
	r, checked := runRepair(t, a, repair.ModeApply)

	waitChecked(t, checked, ns+"/plain")
	if got := r.Counts(); len(got) != 0 {
		t.Errorf("Counts = %v for a pod policy passes through, want none", got)
	}
	if _, ok := podtest.EnrolledAs(a.Store, string(plain.UID)); ok {
		t.Error("a pod policy passes through was enrolled")
	}
	if out, err := sb.Command("nft", "list", "table", "inet", "sluice").CombinedOutput(); err == nil {
		t.Errorf("a pod policy passes through got rules:\n%s", out)
	}
	if evs := podtest.Events(t, admin, plain); len(evs) != 0 {
		t.Errorf("events on a pod left alone: %v", evs)
	}
}

// A pod whose repair fails gets a warning once, is not retried in a loop,
// and is retried once per later update. The retry timer is an hour here:
// with its 30s default a slow run would see the timer's retry too.
func TestFailedRepairRetriesOnlyOnUpdate(t *testing.T) {
	a := podtest.Start(t)
	_, admin := podtest.Kube(t)
	ns := podtest.Namespace(t, admin)
	// Running, but no process of it exists on this machine: no netns.
	pod := podtest.SetRunning(t, admin, a.CreatePod(t, admin, ns, "ghost", true), nstest.TestIP(t))
	r, checked := runRepairWith(t, a, func(c *Config) { c.Mode, c.RetryAfter = repair.ModeApply, time.Hour })

	waitChecked(t, checked, ns+"/ghost")
	ev := kubetest.WaitPodEvent(t, admin, pod, events.ReasonCaptureRepairFailed)
	if ev.Type != corev1.EventTypeWarning || !strings.Contains(ev.Message, "pod"+string(pod.UID)) {
		t.Errorf("event %s %q: want a Warning saying what was looked for", ev.Type, ev.Message)
	}
	if got := r.Counts(); got[OutcomeFailed] != 1 {
		t.Errorf("Counts = %v after the first try, want one failed", got)
	}

	patch := []byte(`{"metadata":{"annotations":{"touched":"1"}}}`)
	if _, err := admin.CoreV1().Pods(ns).Patch(context.Background(), pod.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitChecked(t, checked, ns+"/ghost")
	nstest.Eventually(t, 5*time.Second, func() bool { return r.Counts()[OutcomeFailed] == 2 },
		"the update did not retry the repair: %v", r.Counts())
	podtest.WaitEventCount(t, admin, pod, events.ReasonCaptureRepairFailed, 2)
}
