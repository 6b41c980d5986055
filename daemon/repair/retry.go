package repair

import (
	"context"
	"time"

	"k8s.io/client-go/util/workqueue"
)

const (
	// defaultRetryAfter is the first wait before a failed repair is tried
	// again without an event on the pod: a netns not found yet, an API
	// call that failed, a PodDisruptionBudget that said not now.
	defaultRetryAfter = 30 * time.Second
	// maxRetryAfter caps the doubling: a pod that keeps failing is still
	// tried every few minutes, and counted each time.
	maxRetryAfter = 10 * time.Minute
)

// failure is one pod's failed repair.
type failure struct {
	version  string // the resourceVersion that failed; "" once due again
	key      string // namespace/name, to queue it
	attempts int
	due      time.Time
}

// backoff is the wait after the n-th failure in a row.
func (r *Repairer) backoff(n int) time.Duration {
	d := r.cfg.RetryAfter << min(n-1, 10)
	return min(d, maxRetryAfter)
}

// retryFailed queues failed repairs once their backoff has passed, so a
// pod that stays uncaptured is not left that way until something else
// happens to touch it.
func (r *Repairer) retryFailed(ctx context.Context, q workqueue.TypedInterface[string]) {
	t := time.NewTicker(min(r.cfg.RetryAfter, 5*time.Second))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			for _, key := range r.due(now) {
				q.Add(key)
			}
		}
	}
}

// due marks the failures whose backoff has passed as worth a try and
// returns their keys.
func (r *Repairer) due(now time.Time) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var keys []string
	for uid, f := range r.failedAt {
		if f.version != "" && !now.Before(f.due) {
			f.version = ""
			r.failedAt[uid] = f
			keys = append(keys, f.key)
		}
	}
	return keys
}
