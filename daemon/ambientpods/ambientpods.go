// Package ambientpods moves running pods in and out of the ambient mesh
// live: istio.io/dataplane-mode on a pod or its namespace enrols or
// unenrols it with no restart, as Istio's node agent does. That is not a
// repair, so --repair-mode does not apply: an ambient pod is always
// enrolled in place (a late enrolment), and marked for istiod through the
// redirection annotation. podcheck hands it the pods to look at.
package ambientpods

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	corev1 "k8s.io/api/core/v1"

	"github.com/sluicemesh/sluice/daemon/events"
	"github.com/sluicemesh/sluice/daemon/late"
	"github.com/sluicemesh/sluice/daemon/policy"
	"github.com/sluicemesh/sluice/daemon/redirect"
	"github.com/sluicemesh/sluice/daemon/redirection"
	"github.com/sluicemesh/sluice/daemon/workloads"
)

// OutcomeEnrolled counts an ambient pod enrolled live (a label change),
// beside the repairs.
const OutcomeEnrolled = "ambient-enrolled"

// Enroller enrols and unenrols running pods as policy's ambient answer for
// them changes.
type Enroller struct {
	Store *workloads.Store
	// HostProc is the host's /proc as the agent sees it (--host-proc),
	// where a pod's netns is found.
	HostProc    string
	Events      *events.Recorder       // nil records nothing
	Redirection *redirection.Annotator // nil marks nothing (standalone)
	Log         *slog.Logger
}

// Reconcile handles a pod that has enrolled attachments: an ambient pod
// policy no longer wants is unenrolled; one it still wants gets the
// redirection annotation if it lacks it.
func (e *Enroller) Reconcile(ctx context.Context, pod *corev1.Pod, recs []workloads.Record, d policy.Decision) error {
	ambient := false
	for _, rec := range recs {
		ambient = ambient || rec.Spec.Mode == redirect.ModeAmbient
	}
	if !ambient {
		// Sidecar capture is set at ADD for the pod's life: Envoy depends on it.
		return nil
	}
	if d.Capture && d.Spec.Mode == redirect.ModeAmbient {
		if pod.Annotations[redirection.Annotation] != "enabled" {
			e.annotate(ctx, pod, "enabled")
		}
		return nil
	}
	var errs []error
	for _, rec := range recs {
		errs = append(errs, e.Store.Release(ctx, rec.Attachment, ""))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("unenroll ambient pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	e.Log.Info("unenrolled an ambient pod", "pod", pod.Namespace+"/"+pod.Name, "why", d.Reason)
	e.Events.Pod(pod.Namespace, pod.Name, pod.UID, corev1.EventTypeNormal, events.ReasonAmbientUnenrolled, "removed from the ambient mesh: "+d.Reason)
	if _, ok := pod.Annotations[redirection.Annotation]; ok {
		e.annotate(ctx, pod, "")
	}
	return nil
}

// Enroll enrols a running pod that became ambient.
func (e *Enroller) Enroll(ctx context.Context, pod *corev1.Pod, d policy.Decision) error {
	if err := late.Enroll(ctx, e.Store, e.HostProc, pod, d, e.Log); err != nil {
		// As Istio marks a pod ztunnel refused, but only when nothing of
		// the pod stays captured (see rpc's ADD).
		if errors.Is(err, workloads.ErrZtunnel) && !e.Store.PodEnrolled(string(pod.UID)) {
			e.annotate(ctx, pod, "pending")
		}
		return err
	}
	e.Events.Pod(pod.Namespace, pod.Name, pod.UID, corev1.EventTypeNormal, events.ReasonAmbientEnrolled, "enrolled in the ambient mesh: "+d.Reason)
	e.annotate(ctx, pod, "enabled")
	return nil
}

// annotate sets (value non-empty) or removes the redirection annotation;
// the Annotator retries it until it sticks.
func (e *Enroller) annotate(ctx context.Context, pod *corev1.Pod, value string) {
	e.Redirection.Set(ctx, policy.Pod{Namespace: pod.Namespace, Name: pod.Name, UID: string(pod.UID)}, value)
}
