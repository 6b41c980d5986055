package ztunnel

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/vishvananda/netns"

	"github.com/sluicemesh/sluice/api/zds"
)

// serve runs one ztunnel connection from hello to hang-up.
func (s *Server) serve(ctx context.Context, c *conn) {
	stop := context.AfterFunc(ctx, func() { c.drop("agent shutting down", nil) })
	defer stop()
	defer c.drop("connection done", nil)

	if err := c.readHello(); err != nil {
		c.drop("refused", err)
		return
	}
	// Hold the turn from before the connection is visible until its
	// snapshot is acked: a Del or Add that finds it waits behind the
	// snapshot instead of reaching ztunnel ahead of it.
	c.turn <- struct{}{}
	s.register(c)
	defer s.unregister(c)
	// Snapshot is read after register: a workload enrolled from here on
	// is also sent by Add to this (newest) connection, so none falls
	// between the snapshot and the Adds.
	err := s.sendSnapshot(ctx, c)
	c.release()
	if err != nil {
		c.drop("snapshot failed", err)
		return
	}
	c.synced.Store(true)
	c.watch(s.cfg.Keepalive)
}

// sendSnapshot sends every enrolled workload, then SnapshotSent. The caller
// holds c's turn. ztunnel's refusal of one workload is logged and the
// snapshot goes on, as Istio's agent does: one broken pod must not keep
// ztunnel from the rest.
func (s *Server) sendSnapshot(ctx context.Context, c *conn) error {
	workloads, err := s.snapshot(ctx)
	if err != nil {
		return err
	}
	for _, w := range workloads {
		log := c.log.With("uid", w.UID, "pod", w.Namespace+"/"+w.Name)
		ns, err := s.cfg.Open(w.Netns)
		var req *zds.WorkloadRequest
		if err != nil {
			// ztunnel may still hold the pod from before; Keep stops it
			// from being dropped when the snapshot ends.
			log.Warn("netns cannot be opened; asking ztunnel to keep the workload", "netns", w.Netns, "err", err)
			req, ns = keepRequest(w.UID), netns.None()
		} else {
			req = addRequest(w)
		}
		reason, err := s.exchangeOwned(c, req, ns)
		if err != nil {
			return fmt.Errorf("send workload %s in snapshot: %w", w.UID, err)
		}
		if reason != "" {
			log.Error("ztunnel refused a workload of the snapshot", "reason", reason)
		}
	}
	reason, err := s.exchangeOwned(c, snapshotSentRequest(), netns.None())
	if err != nil {
		return fmt.Errorf("send end of snapshot: %w", err)
	}
	if reason != "" {
		c.log.Error("ztunnel refused the end of the snapshot", "reason", reason)
	}
	c.log.Info("snapshot sent to ztunnel", "workloads", len(workloads))
	return nil
}

// pendingWait bounds Pending: it may wait for the agent's pod cache.
const pendingWait = 30 * time.Second

// snapshot is Snapshot's workloads, then Pending's that Snapshot lacks.
// Pending is read first: a workload adopted between the two reads is in
// Snapshot, and one adopted after both is sent by its Add.
func (s *Server) snapshot(ctx context.Context) ([]Workload, error) {
	var pending []Workload
	if s.cfg.Pending != nil {
		pctx, cancel := context.WithTimeout(ctx, pendingWait)
		defer cancel()
		var err error
		if pending, err = s.cfg.Pending(pctx); err != nil {
			return nil, fmt.Errorf("list workloads pending adoption: %w", err)
		}
	}
	out := s.cfg.Snapshot()
	for _, w := range pending {
		if !slices.ContainsFunc(out, func(o Workload) bool { return o.UID == w.UID }) {
			out = append(out, w)
		}
	}
	return out, nil
}

// exchangeOwned encodes req, exchanges it on c (whose turn the caller
// holds) and closes ns, which it owns from here on, whatever happens.
func (s *Server) exchangeOwned(c *conn, req *zds.WorkloadRequest, ns netns.NsHandle) (string, error) {
	defer closeNS(ns)
	data, err := encode(req)
	if err != nil {
		return "", err
	}
	return c.exchange(data, int(ns))
}

func closeNS(ns netns.NsHandle) {
	if ns.IsOpen() {
		ns.Close()
	}
}
