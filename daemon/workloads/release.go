package workloads

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/sluicemesh/sluice/daemon/podns"
	"github.com/sluicemesh/sluice/daemon/redirect"
)

// Ownership: a verb removes only what its own attachment owns. A table is
// owned by every record naming its netns and goes with the last of them;
// ztunnel's hold on a pod goes with the pod's last attachment; a host probe
// address goes with the last record listing it.

// Release removes the attachment's ruleset and record. A netns that is gone
// and an attachment we never knew are both fine: DEL must not block
// teardown. Without a record nothing in the kernel is touched, whatever
// netnsPath names: the record is journaled before any rule is applied, so
// a table without one is not this attachment's to remove (the path may by
// now name another pod's netns, or a Multus sibling's). netnsPath is only
// logged.
func (s *Store) Release(ctx context.Context, a Attachment, netnsPath string) error {
	defer s.lock(a)()
	s.mu.Lock()
	r := s.recs[a]
	delete(s.recs, a)
	s.mu.Unlock()
	if r == nil {
		s.log.Debug("release of an attachment with no record; nothing touched", "attachment", a.String(), "netns", netnsPath)
		return nil
	}
	if err := s.letGo(ctx, r); err != nil {
		s.mu.Lock()
		if s.recs[a] == nil {
			s.recs[a] = r
		}
		s.mu.Unlock()
		return fmt.Errorf("release %s: %w", a, err)
	}
	return s.dropRecord(a)
}

// drop forgets a record whose netns is gone (the reconciler): only the
// host side and ztunnel are left to undo. Callers hold a's lock.
func (s *Store) drop(ctx context.Context, a Attachment) error {
	s.mu.Lock()
	r := s.recs[a]
	delete(s.recs, a)
	s.mu.Unlock()
	if r == nil {
		return nil
	}
	if isAmbient(r) {
		if err := s.takeBack(ctx, r); err != nil {
			s.log.Error("letting go of a dropped ambient workload", "attachment", a.String(), "err", err)
		}
	}
	return s.dropRecord(a)
}

// letGo undoes r's kernel state, r no longer being listed: the in-pod
// table unless another record still owns that netns, then (ambient) the
// host probe addresses and ztunnel — rules before ztunnel, as Istio
// orders it, so the pod is never captured with no proxy behind.
func (s *Store) letGo(ctx context.Context, r *Record) error {
	if err := s.removeUnshared(r); err != nil {
		return err
	}
	if isAmbient(r) {
		// The capture is gone; a ztunnel that missed the Del drops the pod
		// on its next snapshot, so this is not worth failing the release.
		if err := s.takeBack(ctx, r); err != nil {
			s.log.Error("letting go of an ambient workload", "attachment", r.Attachment.String(), "err", err)
		}
	}
	return nil
}

// removeUnshared deletes r's table unless another listed record names the
// same netns; a netns that is gone, or is no longer the one enrolled, is
// left alone.
func (s *Store) removeUnshared(r *Record) error {
	defer s.lockNetns(r.NetnsInode)()
	s.mu.RLock()
	shared := slices.ContainsFunc(s.listedLocked(), func(o *Record) bool { return sameNetns(o, r) })
	s.mu.RUnlock()
	if shared {
		s.log.Info("netns still owned by another attachment; table kept", "attachment", r.Attachment.String(), "netns", r.Netns)
		return nil
	}
	ns, err := s.openEnrolled(r)
	if errors.Is(err, podns.ErrNotExist) {
		return nil
	}
	if errors.Is(err, podns.ErrHeldElsewhere) {
		// DEL must not block teardown: the table stays with what holds
		// the netns out of reach (a mount; with /proc a root, never a
		// process, which would be reachable).
		s.log.Warn("netns held only outside the netns roots; its table is left there", "attachment", r.Attachment.String(), "err", err)
		return nil
	}
	if err != nil {
		return err
	}
	defer ns.Close()
	// What was applied tells Remove what it need not read back; a spec
	// this build cannot make a ruleset of reads everything.
	had, err := redirect.Build(r.Spec)
	if err != nil {
		had = nil
	}
	return s.kernel.Remove(redirect.Netns(ns), had)
}

// sameNetns says whether two records name one namespace: by cookie when
// both know it (an inode is reused once its namespace is freed, netnsid.go),
// else by inode, else by path (records from before either was kept).
func sameNetns(a, b *Record) bool {
	if a.NetnsCookie != 0 && b.NetnsCookie != 0 {
		return a.NetnsCookie == b.NetnsCookie
	}
	if a.NetnsInode != 0 && b.NetnsInode != 0 {
		return a.NetnsInode == b.NetnsInode
	}
	return a.Netns == b.Netns
}

func (s *Store) listedLocked() []*Record {
	out := make([]*Record, 0, len(s.recs))
	for _, r := range s.recs {
		out = append(out, r)
	}
	return out
}

// dropRecord deletes a released attachment's journal record. When the disk
// refuses, the kernel state is already gone: the attachment is remembered
// as released, never reasserted, and the delete retried by Reconcile.
func (s *Store) dropRecord(a Attachment) error {
	if err := s.deleteRecord(a); err != nil {
		s.mu.Lock()
		s.released[a] = true
		s.mu.Unlock()
		return fmt.Errorf("released %s, but its journal record stays until it can be deleted: %w", a, err)
	}
	return nil
}

// retryReleased deletes the journal records left by releases the disk
// refused, unless the attachment was enrolled again since.
func (s *Store) retryReleased() error {
	s.mu.RLock()
	var pending []Attachment
	for a := range s.released {
		pending = append(pending, a)
	}
	s.mu.RUnlock()
	var errs []error
	for _, a := range pending {
		unlock := s.lock(a)
		s.mu.RLock()
		again := s.recs[a] != nil
		s.mu.RUnlock()
		var err error
		if !again {
			err = s.deleteRecord(a)
		}
		if err == nil {
			s.mu.Lock()
			delete(s.released, a)
			s.mu.Unlock()
		}
		unlock()
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// GC releases every attachment of network that is not in valid. Late
// enrolments are not the runtime's to list, and records without a network
// (journaled before it was kept) cannot be shown to belong to the caller:
// GC leaves both to DEL and the reconciler, which drops a record once its
// netns is gone.
func (s *Store) GC(ctx context.Context, network string, valid []Attachment) ([]Attachment, error) {
	var stale []Attachment
	for _, r := range s.List() {
		if network != "" && r.Network == network && !r.Late && !slices.Contains(valid, r.Attachment) {
			stale = append(stale, r.Attachment)
		}
	}
	var errs []error
	var removed []Attachment
	for _, a := range stale {
		if err := s.Release(ctx, a, ""); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, a)
	}
	return removed, errors.Join(errs...)
}
