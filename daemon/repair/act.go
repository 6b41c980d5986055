package repair

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sluicemesh/sluice/daemon/events"
	"github.com/sluicemesh/sluice/daemon/late"
	"github.com/sluicemesh/sluice/daemon/policy"
)

// why is what every repair event says about how the pod got here.
const why = "the pod is running without sluice traffic capture: it started while the sluice agent was not ready or not running"

// Act does to a pod running uncaptured what --repair-mode says, and
// returns the outcome to count.
func (r *Repairer) Act(ctx context.Context, pod *corev1.Pod, d policy.Decision) (string, error) {
	switch r.cfg.Mode {
	case ModeApply:
		return r.apply(ctx, pod, d)
	case ModeLabel:
		return r.label(ctx, pod)
	case ModeDelete:
		return r.evict(ctx, pod)
	case ModeOff:
		return r.report(pod)
	}
	return "", fmt.Errorf("--repair-mode %q: unknown", r.cfg.Mode)
}

// apply finds the pod's netns and enrolls it as an ADD would have.
func (r *Repairer) apply(ctx context.Context, pod *corev1.Pod, d policy.Decision) (string, error) {
	if err := late.Enroll(ctx, r.cfg.Store, r.cfg.HostProc, pod, d, r.log); err != nil {
		return "", err
	}
	r.event(pod, corev1.EventTypeNormal, events.ReasonCaptureRepaired,
		fmt.Sprintf("%s; its capture rules were programmed now (%s)", why, d.Reason))
	return OutcomeApplied, nil
}

// label marks the pod for someone else to act on. The patch carries the
// pod's uid, so a pod recreated under the same name is never marked. It
// goes through pods/status, as istio-cni's does: the only pod write the
// ClusterRole then needs cannot change a pod's spec.
func (r *Repairer) label(ctx context.Context, pod *corev1.Pod) (string, error) {
	l := r.cfg.Label
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"uid":    pod.UID,
		"labels": map[string]string{l.Key: l.Value},
	}})
	if err != nil {
		return "", fmt.Errorf("encode label patch: %w", err)
	}
	_, err = r.cfg.Client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, patch, metav1.PatchOptions{}, "status")
	if err != nil {
		return "", fmt.Errorf("label pod %s/%s %s: %w", pod.Namespace, pod.Name, l, err)
	}
	r.log.Warn("labelled an uncaptured pod", "pod", pod.Namespace+"/"+pod.Name, "uid", pod.UID, "label", l.String())
	r.event(pod, corev1.EventTypeWarning, events.ReasonUncaptured,
		fmt.Sprintf("%s; labelled %s (--repair-mode=label); delete the pod to have it recreated with capture", why, l))
	return OutcomeLabelled, nil
}

// evict removes the pod through the Eviction API, so its owner recreates
// it and the new sandbox's ADD goes through the plugin. Eviction honours
// PodDisruptionBudgets: a budget that allows no disruption now fails the
// repair, and the retry timer asks again later.
func (r *Repairer) evict(ctx context.Context, pod *corev1.Pod) (string, error) {
	uid := pod.UID
	err := r.cfg.Client.PolicyV1().Evictions(pod.Namespace).Evict(ctx, &policyv1.Eviction{
		ObjectMeta:    metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace},
		DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}},
	})
	switch {
	case apierrors.IsNotFound(err):
		return OutcomeEvicted, nil // gone already: nothing runs uncaptured
	case apierrors.IsTooManyRequests(err):
		return "", fmt.Errorf("evict pod %s/%s: a PodDisruptionBudget allows no disruption now: %w", pod.Namespace, pod.Name, err)
	case err != nil:
		return "", fmt.Errorf("evict pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	r.handledOnce(pod, "evicted an uncaptured pod", events.ReasonUncapturedDeleted,
		why+"; evicted it so it is recreated with capture (--repair-mode=delete)")
	return OutcomeEvicted, nil
}

// report only says so (--repair-mode=off), once per pod.
func (r *Repairer) report(pod *corev1.Pod) (string, error) {
	r.handledOnce(pod, "found a pod running uncaptured; --repair-mode=off leaves it so", events.ReasonUncaptured,
		why+"; left as it is (--repair-mode=off): delete the pod to have it recreated with capture")
	return OutcomeReported, nil
}

// handledOnce marks a pod evicted or reported, so no later update acts on
// it again, and says what was done in the log and in a Warning Event.
func (r *Repairer) handledOnce(pod *corev1.Pod, logMsg, reason, message string) {
	r.mu.Lock()
	r.handled[pod.UID] = true
	r.mu.Unlock()
	r.log.Warn(logMsg, "pod", pod.Namespace+"/"+pod.Name, "uid", pod.UID)
	r.event(pod, corev1.EventTypeWarning, reason, message)
}

// Failed reports a failed repair, the attempt'th in a row; the pod is
// tried again on its next update, and after wait.
func (r *Repairer) Failed(pod *corev1.Pod, err error, attempt int, wait time.Duration) {
	r.log.Error("repairing an uncaptured pod failed", "pod", pod.Namespace+"/"+pod.Name, "uid", pod.UID, "mode", r.cfg.Mode,
		"attempt", attempt, "retry_in", wait, "err", err)
	r.event(pod, corev1.EventTypeWarning, events.ReasonCaptureRepairFailed,
		fmt.Sprintf("%s, and repairing it (--repair-mode=%s) failed; retried in %s or on the pod's next update: %v", why, r.cfg.Mode, wait, err))
}

func (r *Repairer) event(pod *corev1.Pod, eventType, reason, message string) {
	r.cfg.Events.Pod(pod.Namespace, pod.Name, pod.UID, eventType, reason, message)
}
