// Package ambientpods moves running pods in and out of the ambient mesh
// live: istio.io/dataplane-mode on a pod or its namespace enrols or
// unenrols it with no restart, as Istio's node agent does. That is not a
// repair, so --repair-mode does not apply: an ambient pod is always
// enrolled in place (a late enrolment), and marked for istiod through the
// redirection annotation. podcheck hands it the pods to look at.
package ambientpods

import (
	"context"
	"fmt"
	"log/slog"

	corev1 "k8s.io/api/core/v1"

	"github.com/sluicemesh/sluice/daemon/ambientmesh"
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
	// Mesh enrols, unenrols and marks the pods (the ambient owner).
	Mesh *ambientmesh.Mesh
	// HostProc is the host's /proc as the agent sees it (--host-proc),
	// where a pod's netns is found.
	HostProc string
	Events   *events.Recorder // nil records nothing
	Log      *slog.Logger
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
	_, marked := pod.Annotations[redirection.Annotation]
	if err := e.Mesh.Remove(ctx, policyPod(pod), recs, marked); err != nil {
		return fmt.Errorf("unenroll ambient pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	e.Log.Info("unenrolled an ambient pod", "pod", pod.Namespace+"/"+pod.Name, "why", d.Reason)
	e.Events.Pod(pod.Namespace, pod.Name, pod.UID, corev1.EventTypeNormal, events.ReasonAmbientUnenrolled, "removed from the ambient mesh: "+d.Reason)
	return nil
}

// Enroll enrols a running pod that became ambient, under its late id; the
// Mesh marks it (or marks it "pending" when ztunnel refused it).
func (e *Enroller) Enroll(ctx context.Context, pod *corev1.Pod, d policy.Decision) error {
	netns, err := late.FindNetns(e.HostProc, pod)
	if err != nil {
		return err
	}
	rec := late.Record(pod, d, netns)
	if err := e.Mesh.Add(ctx, policyPod(pod), rec, ambientmesh.NoWait); err != nil {
		return fmt.Errorf("enroll pod %s/%s late: %w", pod.Namespace, pod.Name, err)
	}
	e.Log.Info("programmed capture for a running pod", "pod", pod.Namespace+"/"+pod.Name, "uid", pod.UID,
		"netns", netns, "attachment", rec.Attachment.String(), "mode", d.Spec.Mode)
	e.Events.Pod(pod.Namespace, pod.Name, pod.UID, corev1.EventTypeNormal, events.ReasonAmbientEnrolled, "enrolled in the ambient mesh: "+d.Reason)
	return nil
}

// annotate sets (value non-empty) or removes the redirection annotation;
// it is retried until it sticks.
func (e *Enroller) annotate(ctx context.Context, pod *corev1.Pod, value string) {
	e.Mesh.Mark(ctx, policyPod(pod), value)
}

func policyPod(pod *corev1.Pod) policy.Pod {
	return policy.Pod{Namespace: pod.Namespace, Name: pod.Name, UID: string(pod.UID)}
}
