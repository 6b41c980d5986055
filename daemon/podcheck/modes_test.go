package podcheck

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/sluicemesh/sluice/daemon/events"
	"github.com/sluicemesh/sluice/daemon/repair"
	"github.com/sluicemesh/sluice/test/harness/kubetest"
	"github.com/sluicemesh/sluice/test/harness/nstest"
	"github.com/sluicemesh/sluice/test/harness/podtest"
)

// delete mode goes through the Eviction API: a PodDisruptionBudget that
// allows nothing keeps the pod (a failed repair, said so), and once the
// budget is gone the retry timer evicts it with no event on the pod. The
// retries back off 200ms doubling to a 1s cap; the budget goes only once
// the backoff is at its cap, so the wait for the eviction, however slow
// the machine, is one capped retry and never a backoff grown past it.
func TestEvictionRespectsPodDisruptionBudget(t *testing.T) {
	a := podtest.Start(t)
	_, admin := podtest.Kube(t)
	ns := podtest.Namespace(t, admin)
	pod := a.CreatePod(t, admin, ns, "guarded", true)
	patch := []byte(`{"metadata":{"labels":{"app":"guarded"}}}`)
	pod, err := admin.CoreV1().Pods(ns).Patch(context.Background(), pod.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	zero := intstr.FromInt32(0)
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "guard"},
		Spec: policyv1.PodDisruptionBudgetSpec{MaxUnavailable: &zero,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "guarded"}}},
	}
	pdb, err = admin.PolicyV1().PodDisruptionBudgets(ns).Create(context.Background(), pdb, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// No disruption controller runs here: write the status it would, or
	// the API server answers "not processed yet, retry in 10s".
	pdb.Status = policyv1.PodDisruptionBudgetStatus{ObservedGeneration: pdb.Generation, DisruptionsAllowed: 0,
		CurrentHealthy: 1, DesiredHealthy: 1, ExpectedPods: 1}
	if _, err := admin.PolicyV1().PodDisruptionBudgets(ns).UpdateStatus(context.Background(), pdb, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod = podtest.SetRunning(t, admin, pod, nstest.TestIP(t))
	// Ready: an unready pod may be evicted whatever the budget says.
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	if pod, err = admin.CoreV1().Pods(ns).UpdateStatus(context.Background(), pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	r, _ := runRepairWith(t, a, func(c *Config) {
		c.Mode, c.RetryAfter, c.MaxRetryAfter = repair.ModeDelete, 200*time.Millisecond, time.Second
	})

	ev := kubetest.WaitPodEvent(t, admin, pod, events.ReasonCaptureRepairFailed)
	if !strings.Contains(ev.Message, "PodDisruptionBudget") {
		t.Errorf("event %q: want it to name the PodDisruptionBudget", ev.Message)
	}
	if p, err := admin.CoreV1().Pods(ns).Get(context.Background(), pod.Name, metav1.GetOptions{}); err != nil || p.DeletionTimestamp != nil {
		t.Fatalf("a pod its budget protects was deleted (err %v)", err)
	}
	// 200ms, 400ms, 800ms, then 1s: the fourth failure is at the cap.
	nstest.Eventually(t, time.Minute, func() bool { return r.Counts()[OutcomeFailed] >= 4 },
		"the refused eviction was not retried on the timer: %v", r.Counts())
	if err := admin.PolicyV1().PodDisruptionBudgets(ns).Delete(context.Background(), "guard", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	nstest.Eventually(t, time.Minute, func() bool {
		p, err := admin.CoreV1().Pods(ns).Get(context.Background(), pod.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err) || err == nil && p.DeletionTimestamp != nil
	}, "the retry timer never evicted the pod once its budget was gone")
	// The count follows the API call's return, a moment after its effect.
	nstest.Eventually(t, 30*time.Second, func() bool { return r.Counts()[repair.OutcomeEvicted] == 1 },
		"Counts = %v, want one evicted", r.Counts())
	if got := r.Counts(); got[OutcomeFailed] < 1 {
		t.Errorf("Counts = %v, want the failures before the eviction counted", got)
	}
}

// A failed repair is retried on a timer, with no update to the pod. The
// backoff is capped at 400ms, far inside the wait for the third try.
func TestFailedRepairRetriedOnTimer(t *testing.T) {
	a := podtest.Start(t)
	_, admin := podtest.Kube(t)
	ns := podtest.Namespace(t, admin)
	// Running, but no process of it exists on this machine: no netns.
	podtest.SetRunning(t, admin, a.CreatePod(t, admin, ns, "ghost", true), nstest.TestIP(t))
	r, _ := runRepairWith(t, a, func(c *Config) {
		c.Mode, c.RetryAfter, c.MaxRetryAfter = repair.ModeApply, 100*time.Millisecond, 400*time.Millisecond
	})
	nstest.Eventually(t, time.Minute, func() bool { return r.Counts()[OutcomeFailed] >= 3 },
		"a failed repair was not retried on the timer: %v", r.Counts())
}

// A failure on the pod's update keeps its own retry timer. The queue keeps
// one wait per pod, the earliest: the timer of the failure before the
// update lands first, finds the second failure not yet due, and must not
// drop its retry (it did: the pod was then never tried again, and the
// eviction under a PodDisruptionBudget never came).
func TestRetryOfAFailureOnAnUpdateIsKept(t *testing.T) {
	a := podtest.Start(t)
	_, admin := podtest.Kube(t)
	ns := podtest.Namespace(t, admin)
	// Running, but no process of it exists on this machine: no netns.
	pod := podtest.SetRunning(t, admin, a.CreatePod(t, admin, ns, "ghost", true), nstest.TestIP(t))
	// A fixed 5s wait: the update's failure comes well inside the first
	// failure's wait, and is due after it.
	r, _ := runRepairWith(t, a, func(c *Config) {
		c.Mode, c.RetryAfter, c.MaxRetryAfter = repair.ModeApply, 5*time.Second, 5*time.Second
	})
	failed := func() int { return r.Counts()[OutcomeFailed] }
	nstest.Eventually(t, time.Minute, func() bool { return failed() >= 1 }, "the ghost pod was never checked")
	before := failed()
	patch := []byte(`{"metadata":{"annotations":{"touched":"1"}}}`)
	if _, err := admin.CoreV1().Pods(ns).Patch(context.Background(), pod.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	nstest.Eventually(t, time.Minute, func() bool { return failed() > before }, "the update was not checked: %v", r.Counts())
	onUpdate := failed()
	nstest.Eventually(t, time.Minute, func() bool { return failed() > onUpdate },
		"the failure on the update was never retried on its timer: %v", r.Counts())
}

// label mode sets the label it is given, e.g. istio-cni's.
func TestLabelModeUsesConfiguredLabel(t *testing.T) {
	a := podtest.Start(t)
	_, admin := podtest.Kube(t)
	ns := podtest.Namespace(t, admin)
	ip := nstest.TestIP(t)
	pod := podtest.SetRunning(t, admin, a.CreatePod(t, admin, ns, "istio-marked", true), ip)
	runRepairWith(t, a, func(c *Config) { c.Mode = repair.ModeLabel; c.Label = repair.IstioLabel })

	nstest.Eventually(t, 5*time.Second, func() bool {
		p, err := admin.CoreV1().Pods(ns).Get(context.Background(), pod.Name, metav1.GetOptions{})
		return err == nil && p.Labels["cni.istio.io/uninitialized"] == "true"
	}, "pod never labelled cni.istio.io/uninitialized=true")
	if p, _ := admin.CoreV1().Pods(ns).Get(context.Background(), pod.Name, metav1.GetOptions{}); p.Labels[repair.LabelUncaptured] != "" {
		t.Errorf("the default label was set too: %v", p.Labels)
	}
	podtest.WaitEventCount(t, admin, pod, events.ReasonUncaptured, 1)
}

// off mode touches nothing and reports the pod once, also across updates.
func TestOffModeReportsOnce(t *testing.T) {
	a := podtest.Start(t)
	_, admin := podtest.Kube(t)
	ns := podtest.Namespace(t, admin)
	ip := nstest.TestIP(t)
	pod := podtest.SetRunning(t, admin, a.CreatePod(t, admin, ns, "left", true), ip)
	sb := podtest.Sandbox(t, string(pod.UID), ip, true)
	r, checked := runRepair(t, a, repair.ModeOff)

	ev := kubetest.WaitPodEvent(t, admin, pod, events.ReasonUncaptured)
	if ev.Type != corev1.EventTypeWarning || !strings.Contains(ev.Message, "--repair-mode=off") {
		t.Errorf("event %s %q: want a Warning naming the mode", ev.Type, ev.Message)
	}
	waitChecked(t, checked, ns+"/left")
	for len(checked) > 0 { // only the check of the update below counts
		<-checked
	}
	patch := []byte(`{"metadata":{"annotations":{"touched":"1"}}}`)
	if _, err := admin.CoreV1().Pods(ns).Patch(context.Background(), pod.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitChecked(t, checked, ns+"/left")
	podtest.WaitEventCount(t, admin, pod, events.ReasonUncaptured, 1)
	if got := r.Counts(); got[repair.OutcomeReported] != 1 {
		t.Errorf("Counts = %v, want one reported", got)
	}
	if _, ok := podtest.EnrolledAs(a.Store, string(pod.UID)); ok {
		t.Error("off mode enrolled the pod")
	}
	if out, err := sb.Command("nft", "list", "table", "inet", "sluice").CombinedOutput(); err == nil {
		t.Errorf("off mode programmed rules:\n%s", out)
	}
}
