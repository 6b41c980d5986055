package workloads

import (
	"context"
	"errors"
	"fmt"

	"github.com/vishvananda/netns"

	"github.com/sluicemesh/sluice/daemon/redirect"
)

// RolledBack wraps the error of an enrolment or takeover whose rollback
// left the netns, the journal and ztunnel as they were before the call.
type RolledBack struct{ Err error }

func (e RolledBack) Error() string { return e.Err.Error() }
func (e RolledBack) Unwrap() error { return e.Err }

// TakeOver enrolls r in a netns whose traffic another node agent
// (istio-cni) captures, and swaps that capture for this store's with no
// moment of neither and no moment without a proxy: the record is journaled
// first, this store's table goes in beside theirs (both send to the same
// proxy ports; the first NAT binding wins), an ambient pod is handed to
// ztunnel, which held it for the other agent, and only then does
// removeTheirs take the other agent's rules out. Any failure restores the
// netns exactly as it was, their rules and none of ours, and forgets the
// record; ztunnel is never told Del, as their rules still send the pod to
// it.
func (s *Store) TakeOver(ctx context.Context, r Record, removeTheirs func(netns.NsHandle) error) error {
	e, err := s.start(ctx, &r)
	if err != nil {
		return err
	}
	defer e.close()
	if e.prev != nil {
		return fmt.Errorf("take over %s: already enrolled; nothing changed", r.Attachment)
	}
	if err := s.commit(e, &r); err != nil {
		return RolledBack{fmt.Errorf("take over %s: %w", r.Attachment, err)}
	}
	ctx0 := context.WithoutCancel(ctx)
	if isAmbient(&r) {
		if err := s.handOver(ctx, &r); err != nil {
			return s.rollBack(ctx0, e.ns, &r, nil, fmt.Errorf("take over %s: %w", r.Attachment, err))
		}
	}
	if err := removeTheirs(e.ns); err != nil {
		return s.rollBack(ctx0, e.ns, &r, nil, fmt.Errorf("take over %s: %w", r.Attachment, err))
	}
	return nil
}

// rollBack undoes an enrolment (Enroll or TakeOver) whose later step failed
// with cause, r being applied and listed: it restores exactly what was there
// before the call, never less. prev's record (or none) is listed and
// journaled again; the netns gets back the table of whichever listed record
// names it (prev, or a sibling attachment), or loses ours when none does;
// and the probe addresses only r held leave the host table. ztunnel hears
// no Del: a refused Add left it holding nothing new, a missing ack dropped
// the connection and the next snapshot settles it, and a Del would take the
// proxy from a pod whose rules still send it there.
func (s *Store) rollBack(ctx context.Context, ns netns.NsHandle, r, prev *Record, cause error) error {
	s.mu.Lock()
	if prev != nil {
		s.recs[r.Attachment] = prev
	} else {
		delete(s.recs, r.Attachment)
	}
	s.mu.Unlock()
	err := errors.Join(s.restoreTable(ns, r), s.dropHostIPs(ctx, r))
	s.restore(r.Attachment, prev)
	if err != nil {
		s.log.Error("rolling back a failed enrolment", "attachment", r.Attachment.String(), "err", err)
		return errors.Join(cause, fmt.Errorf("roll back %s: %w", r.Attachment, err))
	}
	return RolledBack{cause}
}

// restoreTable puts back in r's netns the table a listed record there owns,
// or removes r's when none does.
func (s *Store) restoreTable(ns netns.NsHandle, r *Record) error {
	defer s.lockNetns(r.NetnsInode)()
	s.mu.RLock()
	var owner *Record
	for _, o := range s.listedLocked() {
		if sameNetns(o, r) {
			owner = o
			break
		}
	}
	s.mu.RUnlock()
	if owner == nil {
		had, err := redirect.Build(r.Spec)
		if err != nil {
			had = nil
		}
		return s.kernel.Remove(redirect.Netns(ns), had)
	}
	rs, err := redirect.Build(owner.Spec)
	if err != nil {
		return fmt.Errorf("rebuild the ruleset of %s: %w", owner.Attachment, err)
	}
	if _, err := s.apply(ns, rs); err != nil {
		return fmt.Errorf("re-apply the ruleset of %s: %w", owner.Attachment, err)
	}
	return nil
}
