package ztunnel

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/vishvananda/netns"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/codes"

	"github.com/sluicemesh/sluice/api/zds"
)

// tracer is the global provider's (daemon/tracing); it records nothing
// without tracing.
var tracer = otel.Tracer("github.com/sluicemesh/sluice/daemon/ztunnel")

// Add hands w's netns to the newest ztunnel and waits for its ack. Record w
// where Snapshot will list it before calling Add: a ztunnel connecting in
// between is then sent w in its snapshot or by this Add (ztunnel takes a
// second Add of a pod it holds in the same netns as done). It fails at once
// with ErrNotConnected when no ztunnel is connected (AwaitConnection
// waits for one), and otherwise within ctx's deadline or the configured
// Timeout, whichever is first.
func (s *Server) Add(ctx context.Context, w Workload) (err error) {
	// Traced as a step of the CNI call in ctx: the wait for ztunnel's ack
	// is an ambient pod start's one step outside this process.
	ctx, span := tracer.Start(ctx, "ztunnel.add")
	defer func() {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}()
	c, _ := s.newest()
	if c == nil {
		return fmt.Errorf("add workload %s to ztunnel: %w", w.UID, ErrNotConnected)
	}
	ns, err := s.cfg.Open(w.Netns)
	if err != nil {
		return fmt.Errorf("add workload %s to ztunnel: %w", w.UID, err)
	}
	if err := s.send(ctx, c, addRequest(w), ns); err != nil {
		return fmt.Errorf("add workload %s to ztunnel: %w", w.UID, err)
	}
	c.log.Info("workload added to ztunnel", "uid", w.UID, "pod", w.Namespace+"/"+w.Name)
	return nil
}

// MaxWaiting bounds the ADDs waiting for a ztunnel at once
// (AwaitConnection); more fail at once. A CNI ADD waits holding none of the
// agent's ADD slots (rpc gives its slot back first), so sidecar and plain
// pods' ADDs never queue behind a ztunnel that stays away; the bound is
// only on the waiters themselves, above what a node's pods re-created
// together after a reboot (its maxPods, 110 by default, 250 at most on the
// large clouds) can put there.
const MaxWaiting = 1024

// AwaitConnection returns once a ztunnel is connected, for the Add of w
// that follows. With none connected it waits for a ztunnel's hello while
// a waiting slot is free, within ctx and ConnectWait, and fails with
// ErrNotConnected when none comes. Only the CNI ADD path calls it
// (ambientmesh.Mesh.Add with WaitForZtunnel): a ztunnel restart takes
// seconds, and a failed ADD is retried by the kubelet only after its
// backoff (10 s and more); background enrolments retry through their work
// queues and must not hold the waiting slots. Call it before taking any
// lock that a DEL needs: it may wait seconds.
func (s *Server) AwaitConnection(ctx context.Context, w Workload) error {
	c, joined := s.newest()
	if c != nil || s.cfg.ConnectWait < 0 {
		return nil
	}
	select {
	case s.waiting <- struct{}{}:
		defer func() { <-s.waiting }()
	default:
		return fmt.Errorf("add workload %s to ztunnel: %w, and %d ADDs wait for one already", w.UID, ErrNotConnected, MaxWaiting)
	}
	began := time.Now()
	s.log.Info("no ztunnel connected: the ADD waits for one", "uid", w.UID, "pod", w.Namespace+"/"+w.Name, "wait", s.cfg.ConnectWait)
	timer := time.NewTimer(s.cfg.ConnectWait)
	defer timer.Stop()
	for {
		select {
		case <-joined:
		case <-ctx.Done():
			return fmt.Errorf("add workload %s to ztunnel: %w: waited for one until the caller's deadline", w.UID, ErrNotConnected)
		case <-timer.C:
			return fmt.Errorf("add workload %s to ztunnel: %w: waited for one %v", w.UID, ErrNotConnected, s.cfg.ConnectWait)
		}
		if c, joined = s.newest(); c != nil {
			c.log.Info("ztunnel connected: the waiting ADD goes on", "uid", w.UID, "waited", time.Since(began).Round(time.Millisecond))
			return nil
		}
	}
}

// Del tells every connected ztunnel to let go of the workload: an old
// ztunnel still draining during an upgrade may hold it. With no ztunnel
// connected there is nothing to tell, and a later one's snapshot will not
// list the workload.
func (s *Server) Del(ctx context.Context, uid string) error {
	conns := s.live()
	errs := make([]error, len(conns))
	var wg sync.WaitGroup
	for i, c := range conns {
		wg.Go(func() { errs[i] = s.send(ctx, c, delRequest(uid), netns.None()) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("delete workload %s from ztunnel: %w", uid, err)
	}
	return nil
}

// send takes c's turn, exchanges req and returns ztunnel's answer, within
// ctx and the Timeout. It owns ns and closes it once sent (or not).
//
// The exchange runs on its own goroutine holding the turn: when the caller
// gives up first, the ack is still read (or the connection dropped after
// Timeout), so it cannot be taken for the next request's.
func (s *Server) send(ctx context.Context, c *conn, req *zds.WorkloadRequest, ns netns.NsHandle) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	if err := c.acquire(ctx); err != nil {
		closeNS(ns)
		return err
	}
	if err := ctx.Err(); err != nil {
		c.release()
		closeNS(ns)
		return fmt.Errorf("wait for ztunnel connection to be free: %w", err)
	}
	type result struct {
		reason string
		err    error
	}
	res := make(chan result, 1)
	go func() {
		defer c.release()
		reason, err := s.exchangeOwned(c, req, ns)
		res <- result{reason, err}
	}()
	select {
	case r := <-res:
		if r.err != nil {
			return r.err
		}
		if r.reason != "" {
			return fmt.Errorf("%w: %s", ErrRefused, r.reason)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("wait for ztunnel ack: %w", ctx.Err())
	}
}
