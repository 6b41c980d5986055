package workloads

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/vishvananda/netns"

	"github.com/sluicemesh/sluice/daemon/podns"
	"github.com/sluicemesh/sluice/daemon/redirect"
)

// Reconcile brings the kernel in line with the journal: records whose netns
// is gone are dropped; the rest are verified and re-applied on drift. It is
// what the agent runs before it reports ready, so it uses every core: each
// record is its own netns and its own lock, and a verify is mostly netlink
// round trips.
func (s *Store) Reconcile(ctx context.Context) error {
	return s.reconcile(ctx, max(4, 2*runtime.NumCPU()))
}

// reconcile is Reconcile with workers records in flight at once.
func (s *Store) reconcile(ctx context.Context, workers int) error {
	errs := []error{s.retryReleased()}
	var mu sync.Mutex
	work := make(chan Record)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for r := range work {
				if err := s.reconcileOne(r, false); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		})
	}
feed:
	for _, r := range s.List() {
		select {
		case work <- r:
		case <-ctx.Done():
			break feed
		}
	}
	close(work)
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return err
	}
	return errors.Join(errs...)
}

// reconcileOne verifies r and reasserts it on drift; full reads the table
// back even when the netns's nftables generation has not moved.
func (s *Store) reconcileOne(r Record, full bool) error {
	defer s.lock(r.Attachment)()
	s.mu.RLock()
	cur := s.recs[r.Attachment]
	s.mu.RUnlock()
	if cur == nil {
		return nil // released since List
	}
	r = *cur
	ns, path, replaced, err := s.openLive(&r)
	switch {
	case errors.Is(err, podns.ErrNotExist):
		return s.dropGone(r, replaced, err)
	case errors.Is(err, podns.ErrHeldElsewhere):
		// Alive, so not dropped (ztunnel keeps the pod, the table its
		// rules); out of reach, so not reasserted until it is gone.
		s.log.Warn("netns held only outside the netns roots; record kept", "attachment", r.Attachment.String(), "err", err)
		return nil
	case err != nil:
		return fmt.Errorf("reconcile %s: %w", r.Attachment, err)
	}
	defer ns.Close()
	if path != r.Netns {
		if err := s.followLive(&r, path, replaced); err != nil {
			return fmt.Errorf("reconcile %s: %w", r.Attachment, err)
		}
	}
	if !s.hasRecord(r.Attachment) {
		// The state dir was emptied under us: the kernel state is still
		// ours, so the journal must say so again before a restart.
		s.log.Warn("journal record missing; writing it again", "attachment", r.Attachment.String())
		if err := s.writeRecord(&r); err != nil {
			return fmt.Errorf("reconcile %s: %w", r.Attachment, err)
		}
	}
	since := r.NFTGen
	if full {
		since = 0
	}
	// The pod's own capture first: trouble with the host table must never
	// hold back the rules that capture the pod.
	err = s.reassert(ns, r, since)
	if isAmbient(&r) && s.ambient != nil {
		err = errors.Join(err, s.reassertHostIPs(&r))
	}
	return err
}

// reassertHostIPs puts r's addresses in the host probe table again, which
// may have been recreated empty (an uninstall and a reinstall) or deleted
// (an `nft flush ruleset` on the node: then written again first).
func (s *Store) reassertHostIPs(r *Record) error {
	s.hostMu.Lock()
	defer s.hostMu.Unlock()
	host := redirect.Netns(s.ambient.Host)
	err := s.kernel.AddHostIPs(host, podAddrs(r)...)
	if err != nil && s.ambient.RestoreHost != nil {
		s.log.Warn("host probe table unusable; writing it again", "attachment", r.Attachment.String(), "err", err)
		if rerr := s.ambient.RestoreHost(); rerr != nil {
			return fmt.Errorf("reconcile %s: host probe table: %w (writing it again: %w)", r.Attachment, err, rerr)
		}
		s.restored.add(RestoredHostTable)
		err = s.kernel.AddHostIPs(host, podAddrs(r)...)
	}
	if err != nil {
		return fmt.Errorf("reconcile %s: host probe table: %w", r.Attachment, err)
	}
	return nil
}

// reassert re-applies r's ruleset when the kernel no longer holds it
// exactly ("reassert", as kube-proxy re-asserts its chains; "repair" is
// the repair package's word, for pods running uncaptured). The table is
// read back only when the netns's nftables generation moved since since
// (redirect.Kernel.VerifySince; 0 always reads it); a restart or verify of
// pods nobody touched is a generation read and the routes per pod.
func (s *Store) reassert(ns netns.NsHandle, r Record, since redirect.Gen) error {
	rs, err := redirect.Build(r.Spec)
	if err != nil {
		return fmt.Errorf("reconcile %s: %w", r.Attachment, err)
	}
	drift, gen, err := s.kernel.VerifySince(redirect.Netns(ns), rs, since)
	if err != nil {
		return fmt.Errorf("reconcile %s: %w", r.Attachment, err)
	}
	if len(drift) == 0 {
		s.noteGen(r, gen)
		return nil
	}
	s.log.Warn("ruleset drifted; re-applying", "attachment", r.Attachment.String(), "drift", drift)
	if gen, err = s.apply(ns, rs); err != nil {
		return fmt.Errorf("reassert %s: %w", r.Attachment, err)
	}
	// Journaled now, not at the next verify as after an ADD: reasserts
	// are rare, and a restart soon after one need not read the table.
	r.genPending = true
	s.noteGen(r, gen)
	s.reasserts.Add(1)
	s.restored.add(driftKinds(drift)...)
	if s.onReassert != nil {
		s.onReassert(r, drift)
	}
	return nil
}

// noteGen records gen as r's verified generation, and journals it when
// the journal does not hold it yet: a restart then needs no table read
// for r either. The caller holds r's attachment lock.
func (s *Store) noteGen(r Record, gen redirect.Gen) {
	if gen == r.NFTGen && !r.genPending {
		return
	}
	r.NFTGen, r.genPending = gen, false
	if err := s.writeRecord(&r); err != nil {
		// Not a failure of the pod's capture: the next verify reads the
		// table and tries again.
		s.log.Warn("could not journal the verified generation", "attachment", r.Attachment.String(), "err", err)
		s.setGen(r.Attachment, 0, false)
		return
	}
	s.setGen(r.Attachment, gen, false)
}

func (s *Store) setGen(a Attachment, gen redirect.Gen, pending bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cur := s.recs[a]; cur != nil {
		cur.NFTGen, cur.genPending = gen, pending
	}
}

// Reasserts counts rulesets re-applied because the kernel drifted.
func (s *Store) Reasserts() int64 { return s.reasserts.Load() }

// Resync verifies every record each verify interval until ctx ends, so
// capture someone flushed, deleted or edited in a running pod is restored
// within seconds without waiting for a CNI call. A verify pass is the
// cheap path: a generation read and the routes per pod, the table read
// back only where the generation moved. Each full interval the pass reads
// every table back whatever its generation: a netns whose generation came
// back to the recorded number by chance is still caught.
func (s *Store) Resync(ctx context.Context, verify, full time.Duration) {
	t := time.NewTicker(verify)
	defer t.Stop()
	lastFull := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			isFull := time.Since(lastFull) >= full
			if isFull {
				lastFull = time.Now()
			}
			if err := s.resyncPass(ctx, verify/2, isFull); err != nil && ctx.Err() == nil {
				s.log.Warn("resync left errors", "err", err)
			}
		}
	}
}

// resyncGap is the least time between the groups of a resync pass.
const resyncGap = 250 * time.Millisecond

// resyncPass reconciles every record once, one at a time, spread over
// span: the periodic pass should not take a core from the ADDs arriving
// meanwhile. Run back to back, 5,000 records were a second of one core,
// and ADDs that came in that second took half as long again (the bench's
// ADDs at 5,000 pods, when they met it). Spread a record at a time, every
// record paid a wake-up of the agent and cost four times the CPU, so the
// records go in groups at least resyncGap apart (~8 ms of work each at
// 5,000 pods and the default interval).
func (s *Store) resyncPass(ctx context.Context, span time.Duration, full bool) error {
	errs := []error{s.retryReleased()}
	recs := s.List()
	err := paced(ctx, len(recs), span, resyncGap, func(i int) {
		errs = append(errs, s.reconcileOne(recs[i], full))
	})
	return errors.Join(append(errs, err)...)
}

// paced calls fn(0), …, fn(n-1) in order, in groups spread over span: the
// group that begins with call i starts no sooner than i/n of span after
// the start, and groups are as small as keeps them minGap apart. It stops
// when ctx ends, returning its error.
func paced(ctx context.Context, n int, span, minGap time.Duration, fn func(int)) error {
	group := 1
	if span > 0 {
		group = max(1, int((time.Duration(n)*minGap+span-1)/span))
	}
	start := time.Now()
	timer := time.NewTimer(span)
	defer timer.Stop()
	for i := range n {
		if i%group == 0 {
			if wait := time.Until(start.Add(span * time.Duration(i) / time.Duration(n))); wait > 0 {
				timer.Reset(wait)
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-timer.C:
				}
			}
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		fn(i)
	}
	return nil
}
