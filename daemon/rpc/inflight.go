package rpc

import (
	"context"
	"sync/atomic"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Inflight bounds concurrent ADDs. A churn storm (a node drain, a rollout,
// a rebooted node re-creating its pods) can put hundreds on a node at once;
// past the bound, calls wait for a slot until their own deadline and then
// get ResourceExhausted, which the plugin reports as "try again later" so
// the runtime retries the pod. Waiting says how deep the queue is.
type Inflight struct {
	slots   chan struct{}
	waiting atomic.Int64
}

// NewInflight allows n concurrent ADDs.
func NewInflight(n int) *Inflight { return &Inflight{slots: make(chan struct{}, n)} }

// Waiting is how many ADDs wait for a slot now (the queue depth).
func (l *Inflight) Waiting() int64 { return l.waiting.Load() }

func (l *Inflight) acquire(ctx context.Context) (func(), error) {
	release := func() { <-l.slots }
	select {
	case l.slots <- struct{}{}:
		return release, nil
	default:
	}
	l.waiting.Add(1)
	defer l.waiting.Add(-1)
	select {
	case l.slots <- struct{}{}:
		return release, nil
	case <-ctx.Done():
		return nil, status.Errorf(codes.ResourceExhausted, "agent busy: %d ADDs in flight and no slot before the deadline", cap(l.slots))
	}
}
