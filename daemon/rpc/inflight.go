package rpc

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Inflight bounds concurrent ADDs. A churn storm (a node drain, a rollout)
// can put hundreds on a node at once; past the bound, calls wait for a slot
// until their own deadline and then get ResourceExhausted, which the plugin
// reports as "try again later" so the runtime retries the pod.
type Inflight chan struct{}

// NewInflight allows n concurrent ADDs.
func NewInflight(n int) Inflight { return make(Inflight, n) }

func (l Inflight) acquire(ctx context.Context) (func(), error) {
	select {
	case l <- struct{}{}:
		return func() { <-l }, nil
	default:
	}
	select {
	case l <- struct{}{}:
		return func() { <-l }, nil
	case <-ctx.Done():
		return nil, status.Errorf(codes.ResourceExhausted, "agent busy: %d ADDs in flight and no slot before the deadline", cap(l))
	}
}
