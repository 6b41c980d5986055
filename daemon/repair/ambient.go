package repair

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/sluicemesh/sluice/daemon/events"
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
			pods, _ := r.pods.Pods(n.Name).List(labels.Everything()) // the cache holds only pods: no error
			for _, pod := range pods {
				q.Add(pod.Namespace + "/" + pod.Name)
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
	r.event(pod, corev1.EventTypeNormal, events.ReasonAmbientUnenrolled, "removed from the ambient mesh: "+d.Reason)
	if _, ok := pod.Annotations[AnnotationRedirection]; ok {
		return r.annotate(ctx, pod, "")
	}
	return nil
}

// enrollAmbient enrols a running pod that became ambient.
func (r *Repairer) enrollAmbient(ctx context.Context, pod *corev1.Pod, d policy.Decision) error {
	if err := r.enroll(ctx, pod, d); err != nil {
		if errors.Is(err, workloads.ErrZtunnel) {
			r.annotate(ctx, pod, "pending") // as Istio marks a pod ztunnel refused
		}
		return err
	}
	r.event(pod, corev1.EventTypeNormal, events.ReasonAmbientEnrolled, "enrolled in the ambient mesh: "+d.Reason)
	return r.annotate(ctx, pod, "enabled")
}

// annotate sets (value non-empty) or removes the redirection annotation,
// retried on a timer until it sticks.
func (r *Repairer) annotate(ctx context.Context, pod *corev1.Pod, value string) error {
	r.redirection.Set(ctx, policy.Pod{Namespace: pod.Namespace, Name: pod.Name, UID: string(pod.UID)}, value)
	return nil
}

// Redirection is the annotator the Repairer keeps retrying (Run runs it),
// for the ADD path to share.
func (r *Repairer) Redirection() *Redirection { return r.redirection }

// Redirection keeps ambient.istio.io/redirection on ambient pods as Istio's
// node agent does: istiod sends a workload HBONE only once it reads
// "enabled". The patch goes to pods/status (the lower privilege; both
// subresources may change metadata) and carries the pod's uid, so a pod
// recreated under the name is never marked. A patch that fails is retried
// with backoff until it sticks, the pod is gone, or a newer value replaces
// it.
type Redirection struct {
	client kubernetes.Interface
	log    *slog.Logger
	queue  workqueue.TypedRateLimitingInterface[types.UID]

	mu         sync.Mutex
	want       map[types.UID]redirectionWant // values not yet known to be applied
	warnedRBAC atomic.Bool
}

type redirectionWant struct {
	pod   policy.Pod
	value string // "" removes the annotation
	gen   uint64
}

// Retry backoff per pod, and the budget of one retried patch.
const (
	redirectionRetryMin = 500 * time.Millisecond
	redirectionRetryMax = 30 * time.Second
	redirectionPatch    = 10 * time.Second
	// patchReserve is the part of a CNI call's deadline left to answering
	// it: an ADD whose capture is done is not failed by a slow API server.
	patchReserve = 100 * time.Millisecond
)

// NewRedirection returns a Redirection; Run retries its failed patches.
func NewRedirection(client kubernetes.Interface, log *slog.Logger) *Redirection {
	if log == nil {
		log = slog.Default()
	}
	rl := workqueue.NewTypedItemExponentialFailureRateLimiter[types.UID](redirectionRetryMin, redirectionRetryMax)
	return &Redirection{client: client, log: log, want: map[types.UID]redirectionWant{},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(rl, workqueue.TypedRateLimitingQueueConfig[types.UID]{Name: "redirection"})}
}

var redirectionGen atomic.Uint64

// Set patches the pod's annotation to value ("" removes it) within ctx's
// deadline (less a reserve for the caller's answer); a failure is logged
// and retried by Run. A nil Redirection (standalone) does nothing.
func (r *Redirection) Set(ctx context.Context, pod policy.Pod, value string) {
	if r == nil || pod.UID == "" || pod.Name == "" {
		return
	}
	uid := types.UID(pod.UID)
	w := redirectionWant{pod: pod, value: value, gen: redirectionGen.Add(1)}
	r.mu.Lock()
	r.want[uid] = w
	r.mu.Unlock()
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) > 2*patchReserve {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, dl.Add(-patchReserve))
		defer cancel()
	}
	if err := r.patch(ctx, w); err != nil {
		r.log.Warn("setting the ambient redirection annotation failed; retrying", "pod", pod.Namespace+"/"+pod.Name,
			"uid", pod.UID, "value", value, "err", err)
		r.queue.AddRateLimited(uid)
		return
	}
	r.done(uid, w.gen)
}

// Apply patches the pod's annotation to value once, within ctx's deadline
// (less a reserve for the caller's answer), and returns the error: the ADD
// path fails when istiod cannot be told, as Istio's does. A failed value is
// not retried (the ADD that wanted it is being rolled back); a pending
// want it replaced is dropped too, as Set would have replaced it.
func (r *Redirection) Apply(ctx context.Context, pod policy.Pod, value string) error {
	if r == nil || pod.UID == "" || pod.Name == "" {
		return nil
	}
	uid := types.UID(pod.UID)
	w := redirectionWant{pod: pod, value: value, gen: redirectionGen.Add(1)}
	r.mu.Lock()
	r.want[uid] = w
	r.mu.Unlock()
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) > 2*patchReserve {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, dl.Add(-patchReserve))
		defer cancel()
	}
	err := r.patch(ctx, w)
	r.done(uid, w.gen)
	return err
}

// done forgets a want once applied, unless a newer one replaced it.
func (r *Redirection) done(uid types.UID, gen uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.want[uid].gen == gen {
		delete(r.want, uid)
		r.queue.Forget(uid)
	}
}

// Run retries failed patches until ctx ends.
func (r *Redirection) Run(ctx context.Context) {
	go func() { <-ctx.Done(); r.queue.ShutDown() }()
	for {
		uid, shutdown := r.queue.Get()
		if shutdown {
			return
		}
		r.mu.Lock()
		w, ok := r.want[uid]
		r.mu.Unlock()
		if ok {
			pctx, cancel := context.WithTimeout(ctx, redirectionPatch)
			err := r.patch(pctx, w)
			cancel()
			if err != nil && ctx.Err() == nil {
				r.log.Warn("retrying the ambient redirection annotation", "pod", w.pod.Namespace+"/"+w.pod.Name, "uid", w.pod.UID, "err", err)
				r.queue.AddRateLimited(uid)
			} else if err == nil {
				r.done(uid, w.gen)
			}
		}
		r.queue.Done(uid)
	}
}

// patch applies w once. A pod that is gone, or whose name now belongs to
// another uid, needs nothing: that is success.
func (r *Redirection) patch(ctx context.Context, w redirectionWant) error {
	var v any = w.value
	if w.value == "" {
		v = nil
	}
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"uid":         w.pod.UID,
		"annotations": map[string]any{AnnotationRedirection: v},
	}})
	if err != nil {
		return fmt.Errorf("encode annotation patch: %w", err)
	}
	pods := r.client.CoreV1().Pods(w.pod.Namespace)
	_, err = pods.Patch(ctx, w.pod.Name, types.MergePatchType, body, metav1.PatchOptions{}, "status")
	if apierrors.IsForbidden(err) {
		// A ClusterRole from before pods/status was granted (chart and
		// agent upgraded out of step): the main resource still works.
		if r.warnedRBAC.CompareAndSwap(false, true) {
			r.log.Warn("no RBAC for patch on pods/status; annotating through pods (update the sluice ClusterRole)", "err", err)
		}
		_, err = pods.Patch(ctx, w.pod.Name, types.MergePatchType, body, metav1.PatchOptions{})
	}
	switch {
	case err == nil, apierrors.IsNotFound(err), apierrors.IsConflict(err), uidChanged(err):
		return nil
	}
	return fmt.Errorf("annotate pod %s/%s %s=%q: %w", w.pod.Namespace, w.pod.Name, AnnotationRedirection, w.value, err)
}

// uidChanged says a patch was refused because the pod under the name has
// another uid (pods/status answers Invalid "metadata.uid: field is
// immutable", pods answers Conflict).
func uidChanged(err error) bool {
	var se *apierrors.StatusError
	if !apierrors.IsInvalid(err) || !errors.As(err, &se) || se.ErrStatus.Details == nil {
		return false
	}
	for _, c := range se.ErrStatus.Details.Causes {
		if c.Field == "metadata.uid" {
			return true
		}
	}
	return false
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
