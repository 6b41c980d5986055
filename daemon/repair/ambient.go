package repair

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/sluicemesh/sluice/daemon/policy"
	"github.com/sluicemesh/sluice/daemon/redirect"
	"github.com/sluicemesh/sluice/daemon/workloads"
)

// AnnotationRedirection is what Istio's tooling (istioctl, ztunnel-config)
// reads to tell an ambient pod is enrolled.
const AnnotationRedirection = "ambient.istio.io/redirection"

// Ambient enrolment follows labels on running pods: istio.io/dataplane-mode
// on a pod or its namespace enrols or unenrols it live, no restart, as
// Istio's node agent does. That is not a repair, so --repair-mode does not
// apply: an ambient pod is always enrolled in place.

// namespaceHandler re-checks a namespace's pods when its labels change.
func (r *Repairer) namespaceHandler(q workqueue.TypedInterface[string]) cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(old, obj any) {
			o, ok1 := old.(*corev1.Namespace)
			n, ok2 := obj.(*corev1.Namespace)
			if !ok1 || !ok2 || maps.Equal(o.Labels, n.Labels) {
				return
			}
			for _, key := range r.cfg.Policy.CachedPodKeys(n.Name) {
				q.Add(key)
			}
		},
	}
}

// reconcileEnrolled handles a pod that has enrolled attachments: an
// ambient pod policy no longer wants is unenrolled; one it still wants gets
// the redirection annotation if it lacks it.
func (r *Repairer) reconcileEnrolled(ctx context.Context, pod *corev1.Pod, recs []workloads.Record, d policy.Decision) error {
	ambient := false
	for _, rec := range recs {
		ambient = ambient || rec.Spec.Mode == redirect.ModeAmbient
	}
	if !ambient {
		// Sidecar capture is set at ADD for the pod's life: Envoy depends on it.
		return nil
	}
	if d.Capture && d.Spec.Mode == redirect.ModeAmbient {
		if pod.Annotations[AnnotationRedirection] != "enabled" {
			return r.annotate(ctx, pod, "enabled")
		}
		return nil
	}
	var errs []error
	for _, rec := range recs {
		errs = append(errs, r.cfg.Store.Release(ctx, rec.Attachment, ""))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("unenroll ambient pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	r.log.Info("unenrolled an ambient pod", "pod", pod.Namespace+"/"+pod.Name, "why", d.Reason)
	r.event(pod, corev1.EventTypeNormal, "AmbientUnenrolled", "removed from the ambient mesh: "+d.Reason)
	if _, ok := pod.Annotations[AnnotationRedirection]; ok {
		return r.annotate(ctx, pod, "")
	}
	return nil
}

// enrollAmbient enrols a running pod that became ambient.
func (r *Repairer) enrollAmbient(ctx context.Context, pod *corev1.Pod, d policy.Decision) error {
	if err := r.enroll(ctx, pod, d); err != nil {
		return err
	}
	r.event(pod, corev1.EventTypeNormal, "AmbientEnrolled", "enrolled in the ambient mesh: "+d.Reason)
	return r.annotate(ctx, pod, "enabled")
}

// annotate sets (value non-empty) or removes the redirection annotation.
// The patch carries the uid, so a pod recreated under the name is untouched.
func (r *Repairer) annotate(ctx context.Context, pod *corev1.Pod, value string) error {
	var v any = value
	if value == "" {
		v = nil
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"uid":         pod.UID,
		"annotations": map[string]any{AnnotationRedirection: v},
	}})
	if err != nil {
		return fmt.Errorf("encode annotation patch: %w", err)
	}
	_, err = r.cfg.Client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return fmt.Errorf("annotate pod %s/%s %s: %w", pod.Namespace, pod.Name, AnnotationRedirection, err)
	}
	return nil
}

// releaseLate drops the late enrolments of a deleted pod: the runtime's DEL
// names its sandbox, never our late id.
func (r *Repairer) releaseLate(ctx context.Context, uid types.UID) {
	for _, rec := range r.records(uid) {
		if !rec.Late {
			continue
		}
		if err := r.cfg.Store.Release(ctx, rec.Attachment, ""); err != nil {
			r.log.Warn("release a deleted pod's late enrolment", "attachment", rec.Attachment.String(), "err", err)
		}
	}
}
