package podcheck

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/sluicemesh/sluice/daemon/ambientpods"
	"github.com/sluicemesh/sluice/daemon/kubecache"
	"github.com/sluicemesh/sluice/daemon/late"
	"github.com/sluicemesh/sluice/daemon/policy"
	"github.com/sluicemesh/sluice/daemon/redirect"
)

// podHandler queues pods that may need a job; the checks that cost
// something run on the workers.
func (c *Checker) podHandler(ctx context.Context, q workqueue.TypedRateLimitingInterface[string]) cache.ResourceEventHandler {
	enqueue := func(obj any) {
		pod, ok := obj.(*corev1.Pod)
		if !ok || !late.Settled(pod) {
			return
		}
		if key, err := cache.MetaNamespaceKeyFunc(pod); err == nil {
			q.Add(key)
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
		DeleteFunc: func(obj any) {
			pod, ok := kubecache.DeletedPod(obj)
			if !ok {
				return
			}
			key := pod.Namespace + "/" + pod.Name
			c.mu.Lock()
			delete(c.failedAt, key)
			c.mu.Unlock()
			q.Forget(key)
			c.repair.Forget(pod)
			c.adopter.Forget(pod)
			go late.Release(ctx, c.cfg.Store, pod.UID, c.log)
		},
	}
}

// namespaceHandler re-checks a namespace's pods when its labels change
// (ambient enablement, sidecar injection).
func (c *Checker) namespaceHandler(q workqueue.TypedInterface[string]) cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(old, obj any) {
			o, ok1 := old.(*kubecache.Namespace)
			n, ok2 := obj.(*kubecache.Namespace)
			if !ok1 || !ok2 || n.SameLabels(o) {
				return
			}
			pods, _ := c.pods.Pods(n.Name).List(labels.Everything()) // the cache holds only pods: no error
			for _, pod := range pods {
				q.Add(pod.Namespace + "/" + pod.Name)
			}
		},
	}
}

// next checks one queued pod; false once the queue is shut down. The
// queue never hands out a key being worked on, so one pod is never
// checked twice at once.
func (c *Checker) next(ctx context.Context, q workqueue.TypedRateLimitingInterface[string]) bool {
	key, shutdown := q.Get()
	if shutdown {
		return false
	}
	defer q.Done(key)
	ctx, cancel := context.WithTimeout(ctx, perPod)
	defer cancel()
	c.check(ctx, q, key)
	c.log.Debug("checked pod for missing capture", "pod", key)
	if c.onChecked != nil {
		c.onChecked(key)
	}
	return true
}

// failer is a job that reports its own failures.
type failer interface {
	Failed(pod *corev1.Pod, err error, attempt int, wait time.Duration)
}

// check routes the pod at key, if settled, to its job; a failure is
// retried after the rate limiter's backoff for the key.
func (c *Checker) check(ctx context.Context, q workqueue.TypedRateLimitingInterface[string], key string) {
	namespace, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return
	}
	pod, err := c.pods.Pods(namespace).Get(name)
	if err != nil || !late.Settled(pod) {
		return
	}
	c.mu.Lock()
	f, failed := c.failedAt[key]
	c.mu.Unlock()
	if failed && f.version == pod.ResourceVersion && time.Now().Before(f.due) {
		// An event replaying the failed version, or the timer of an
		// earlier failure: the retry comes at due. It is scheduled again
		// here because the queue keeps only the earliest wait per key, so
		// a failure on an update that came before the previous failure's
		// timer had its own, later wait dropped for that timer's.
		q.AddAfter(key, time.Until(f.due))
		return
	}
	outcome, job, err := c.route(ctx, key, pod)
	if err != nil {
		c.failed(q, key, pod, job, err)
		return
	}
	c.mu.Lock()
	delete(c.failedAt, key)
	if outcome != "" {
		c.outcomes[outcome]++
	}
	c.mu.Unlock()
	q.Forget(key)
}

// route hands the pod to its job, in the order the package doc gives,
// and returns what to count and who reports a failure.
func (c *Checker) route(ctx context.Context, key string, pod *corev1.Pod) (outcome string, job failer, err error) {
	recs := late.Records(c.cfg.Store, pod.UID)
	if len(recs) == 0 && c.repair.Done(pod) {
		return "", nil, nil
	}
	d, err := c.cfg.Policy.Decide(ctx, policy.Pod{Namespace: pod.Namespace, Name: pod.Name, UID: string(pod.UID)})
	switch {
	case err != nil && len(recs) == 0:
		return "", c.repair, fmt.Errorf("ask policy about pod %s: %w", key, err)
	case err != nil:
		return "", nil, nil // enrolled: keep what it has until policy answers
	case len(recs) > 0:
		return "", c.repair, c.ambient.Reconcile(ctx, pod, recs, d)
	case !d.Capture:
		return "", nil, nil
	}
	if outcome, handled, err := c.adopter.Check(ctx, pod, d); handled {
		return outcome, c.adopter, err
	}
	if d.Spec.Mode == redirect.ModeAmbient {
		return ambientpods.OutcomeEnrolled, c.repair, c.ambient.Enroll(ctx, pod, d)
	}
	outcome, err = c.repair.Act(ctx, pod, d)
	return outcome, c.repair, err
}

// failed counts a failed check and schedules its retry through the rate
// limiter; job reports it (log and Event).
func (c *Checker) failed(q workqueue.TypedRateLimitingInterface[string], key string, pod *corev1.Pod, job failer, err error) {
	wait := c.retries.When(key)
	attempt := c.retries.NumRequeues(key)
	c.mu.Lock()
	c.failedAt[key] = failure{version: pod.ResourceVersion, due: time.Now().Add(wait)}
	c.outcomes[OutcomeFailed]++
	c.mu.Unlock()
	q.AddAfter(key, wait)
	job.Failed(pod, err, attempt, wait)
}
