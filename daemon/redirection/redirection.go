// Package redirection keeps ambient.istio.io/redirection on ambient pods,
// as Istio's node agent does: istiod sends a workload HBONE only once it
// reads "enabled", and Istio's tooling (istioctl, ztunnel-config) reads it
// to tell a pod is enrolled. daemon/ambientmesh, the owner of ambient
// enrolment, builds the one Annotator and is its only caller: the ADD path
// sets it once and fails when it cannot (Apply); live enrolment and
// adoption set it and leave the retries to the Annotator's rate-limited
// workqueue (Set, Run).
//
// On the ADD path the patch goes to pods/status within the call's
// deadline less 100 ms: enabled once ztunnel acked, pending when it did
// not and nothing of the pod stays enrolled (a refused re-ADD rolls back
// to the capture it had). Other values retry with backoff (0.5 s to 30
// s). Without RBAC for pods/status it falls back to pods and warns once.
package redirection

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/workqueue"

	"github.com/sluicemesh/sluice/daemon/policy"
)

// Annotation is what istiod and Istio's tooling read.
const Annotation = "ambient.istio.io/redirection"

// Annotator sets the annotation. The patch goes to pods/status (the lower
// privilege; both subresources may change metadata) and carries the pod's uid, so a pod
// recreated under the name is never marked. A patch that fails is retried
// with backoff until it sticks, the pod is gone, or a newer value replaces
// it.
type Annotator struct {
	client kubernetes.Interface
	log    *slog.Logger
	queue  workqueue.TypedRateLimitingInterface[types.UID]

	mu         sync.Mutex
	want       map[types.UID]wanted // values not yet known to be applied
	warnedRBAC atomic.Bool
}

type wanted struct {
	pod   policy.Pod
	value string // "" removes the annotation
	gen   uint64
}

// Retry backoff per pod, and the budget of one retried patch.
const (
	retryMin    = 500 * time.Millisecond
	retryMax    = 30 * time.Second
	patchBudget = 10 * time.Second
	// patchReserve is the part of a CNI call's deadline left to answering
	// it: an ADD whose capture is done is not failed by a slow API server.
	patchReserve = 100 * time.Millisecond
)

// New returns an Annotator; Run retries its failed patches.
func New(client kubernetes.Interface, log *slog.Logger) *Annotator {
	return newAnnotator(client, log, retryMax)
}

// newAnnotator is New with the retry backoff capped at maxWait: a test
// that waits for a retry caps it below its deadline, so a backoff grown
// by early failures cannot outlast the wait.
func newAnnotator(client kubernetes.Interface, log *slog.Logger, maxWait time.Duration) *Annotator {
	if log == nil {
		log = slog.Default()
	}
	rl := workqueue.NewTypedItemExponentialFailureRateLimiter[types.UID](min(retryMin, maxWait), maxWait)
	return &Annotator{client: client, log: log, want: map[types.UID]wanted{},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(rl, workqueue.TypedRateLimitingQueueConfig[types.UID]{Name: "redirection"})}
}

var generations atomic.Uint64

// Set patches the pod's annotation to value ("" removes it) within ctx's
// deadline (less a reserve for the caller's answer); a failure is logged
// and retried by Run. A nil Annotator (standalone) does nothing.
func (r *Annotator) Set(ctx context.Context, pod policy.Pod, value string) {
	if r == nil || pod.UID == "" || pod.Name == "" {
		return
	}
	uid := types.UID(pod.UID)
	w := wanted{pod: pod, value: value, gen: generations.Add(1)}
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
func (r *Annotator) Apply(ctx context.Context, pod policy.Pod, value string) error {
	if r == nil || pod.UID == "" || pod.Name == "" {
		return nil
	}
	uid := types.UID(pod.UID)
	w := wanted{pod: pod, value: value, gen: generations.Add(1)}
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
func (r *Annotator) done(uid types.UID, gen uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.want[uid].gen == gen {
		delete(r.want, uid)
		r.queue.Forget(uid)
	}
}

// Run retries failed patches until ctx ends.
func (r *Annotator) Run(ctx context.Context) {
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
			pctx, cancel := context.WithTimeout(ctx, patchBudget)
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
func (r *Annotator) patch(ctx context.Context, w wanted) error {
	var v any = w.value
	if w.value == "" {
		v = nil
	}
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"uid":         w.pod.UID,
		"annotations": map[string]any{Annotation: v},
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
	return fmt.Errorf("annotate pod %s/%s %s=%q: %w", w.pod.Namespace, w.pod.Name, Annotation, w.value, err)
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
