package repair

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sluicemesh/sluice/daemon/events"
	"github.com/sluicemesh/sluice/daemon/podns"
	"github.com/sluicemesh/sluice/daemon/policy"
	"github.com/sluicemesh/sluice/daemon/workloads"
)

// why is what every repair event says about how the pod got here.
const why = "the pod is running without sluice traffic capture: it started while the sluice agent was not ready or not running"

// apply finds the pod's netns and enrolls it as an ADD would have.
func (r *Repairer) apply(ctx context.Context, pod *corev1.Pod, d policy.Decision) (string, error) {
	if err := r.enroll(ctx, pod, d); err != nil {
		return "", err
	}
	r.event(pod, corev1.EventTypeNormal, events.ReasonCaptureRepaired,
		fmt.Sprintf("%s; its capture rules were programmed now (%s)", why, d.Reason))
	return OutcomeApplied, nil
}

// enroll finds a running pod's netns and enrols it under a late id.
func (r *Repairer) enroll(ctx context.Context, pod *corev1.Pod, d policy.Decision) error {
	netns, err := podns.FindPodNetns(r.cfg.HostProc, string(pod.UID), podIPs(pod))
	if err != nil {
		return err
	}
	return r.enrollAt(ctx, pod, d, netns)
}

// enrollAt enrols the pod whose netns is at the path netns.
func (r *Repairer) enrollAt(ctx context.Context, pod *corev1.Pod, d policy.Decision, netns string) error {
	ips := podIPs(pod)
	rec := workloads.Record{
		Attachment:     workloads.Attachment{ContainerID: LateContainerID(string(pod.UID)), IfName: "eth0"},
		PodNamespace:   pod.Namespace,
		PodName:        pod.Name,
		PodUID:         string(pod.UID),
		ServiceAccount: d.ServiceAccount, // ztunnel's identity for an ambient pod
		Netns:          netns,
		IPs:            hostPrefixes(ips),
		Spec:           d.Spec,
		Late:           true,
	}
	if err := r.cfg.Store.Enroll(ctx, rec); err != nil {
		return fmt.Errorf("enroll pod %s/%s late: %w", pod.Namespace, pod.Name, err)
	}
	r.log.Info("programmed capture for a running pod", "pod", pod.Namespace+"/"+pod.Name, "uid", pod.UID,
		"netns", netns, "attachment", rec.Attachment.String(), "mode", d.Spec.Mode)
	return nil
}

// label marks the pod for someone else to act on. The patch carries the
// pod's uid, so a pod recreated under the same name is never marked.
func (r *Repairer) label(ctx context.Context, pod *corev1.Pod) (string, error) {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"uid":    pod.UID,
		"labels": map[string]string{LabelUncaptured: "true"},
	}})
	if err != nil {
		return "", fmt.Errorf("encode label patch: %w", err)
	}
	_, err = r.cfg.Client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return "", fmt.Errorf("label pod %s/%s %s=true: %w", pod.Namespace, pod.Name, LabelUncaptured, err)
	}
	r.log.Warn("labelled an uncaptured pod", "pod", pod.Namespace+"/"+pod.Name, "uid", pod.UID, "label", LabelUncaptured)
	r.event(pod, corev1.EventTypeWarning, events.ReasonUncaptured,
		fmt.Sprintf("%s; labelled %s=true (--repair-mode=label); delete the pod to have it recreated with capture", why, LabelUncaptured))
	return OutcomeLabelled, nil
}

// delete removes the pod so its owner recreates it, and the new sandbox's
// ADD goes through the plugin. The Event comes first: it is how the owner
// learns why the pod went.
func (r *Repairer) delete(ctx context.Context, pod *corev1.Pod) (string, error) {
	r.event(pod, corev1.EventTypeWarning, events.ReasonUncapturedDeleted,
		fmt.Sprintf("%s; deleting it so it is recreated with capture (--repair-mode=delete)", why))
	uid := pod.UID
	err := r.cfg.Client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
		Preconditions: &metav1.Preconditions{UID: &uid},
	})
	if err != nil && !apierrors.IsNotFound(err) {
		return "", fmt.Errorf("delete pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	r.log.Warn("deleted an uncaptured pod", "pod", pod.Namespace+"/"+pod.Name, "uid", pod.UID)
	return OutcomeDeleted, nil
}

// failed records a failed repair; the pod is tried again on its next
// update, not before.
func (r *Repairer) failed(pod *corev1.Pod, err error) {
	r.mu.Lock()
	r.failedAt[pod.UID] = pod.ResourceVersion
	r.outcomes[OutcomeFailed]++
	r.mu.Unlock()
	r.log.Error("repairing an uncaptured pod failed", "pod", pod.Namespace+"/"+pod.Name, "uid", pod.UID, "mode", r.cfg.Mode, "err", err)
	r.event(pod, corev1.EventTypeWarning, events.ReasonCaptureRepairFailed,
		fmt.Sprintf("%s, and repairing it (--repair-mode=%s) failed; retried on the pod's next update: %v", why, r.cfg.Mode, err))
}

func (r *Repairer) event(pod *corev1.Pod, eventType, reason, message string) {
	r.cfg.Events.Pod(pod.Namespace, pod.Name, pod.UID, eventType, reason, message)
}
