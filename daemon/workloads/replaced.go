package workloads

import (
	"context"
	"fmt"

	"github.com/sluicemesh/sluice/daemon/podns"
)

// A record's path (the one its ADD named, a bind mount under the runtime's
// netns dir) that comes to name another namespace was replaced: someone
// mounted another netns at it. The agent cannot prove the new one is the
// pod's, so nothing is ever written to it; what it does is the outcome
// label of sluice_netns_replaced_total. A /proc/<pid> path naming another
// namespace is pid reuse, not a replacement, and is not counted.
//
// It is reported (WARN, the counter, a NetnsReplaced Event), not handed
// to --repair-mode: that acts on pods running uncaptured, and this pod's
// processes still are captured in their own netns; apply would write to
// the new one, and labelling or evicting a captured pod because of a mount
// is its owner's call, which the Event asks for.
const (
	// ReplacedFollowed: the pod's own netns is still held (its
	// processes), found by cookie and verified there from then on.
	ReplacedFollowed = "followed"
	// ReplacedDropped: nothing holds the pod's own netns any more; the
	// record is dropped.
	ReplacedDropped = "dropped"
)

// ReplacedOutcomes lists every outcome, each exported from the start.
var ReplacedOutcomes = []string{ReplacedFollowed, ReplacedDropped}

// errReplaced is wrapped when a record's path, not a /proc one, opens a
// namespace other than the one enrolled. It wraps podns.ErrNotExist: for
// the record, the path is gone.
var errReplaced = fmt.Errorf("another netns is mounted at its path: %w", podns.ErrNotExist)

// dropGone drops r, whose netns nothing holds any more (err says why);
// replaced: its path names another namespace, to which nothing is
// written, as the agent cannot prove it is the pod's. Counted once: the
// record goes.
func (s *Store) dropGone(r Record, replaced bool, err error) error {
	if !replaced {
		s.log.Info("netns gone; dropping workload", "attachment", r.Attachment.String(), "netns", r.Netns)
		return s.drop(context.Background(), r.Attachment)
	}
	s.log.Warn("netns replaced at its path and not held any more; dropping workload", "attachment", r.Attachment.String(), "netns", r.Netns, "err", err)
	derr := s.drop(context.Background(), r.Attachment)
	s.noteReplaced(r, "")
	return derr
}

// followLive makes path, where r's own netns is reachable now, r's path
// (follow). replaced: r.Netns names another namespace, mounted there; the
// pod's processes are still in its own, verified at path from now on, and
// a container the pod starts later joins the new one, uncaptured.
func (s *Store) followLive(r *Record, path string, replaced bool) error {
	if !replaced {
		s.log.Info("netns outlived its path; following it", "attachment", r.Attachment.String(), "from", r.Netns, "to", path)
		return s.follow(r, path)
	}
	s.log.Warn("netns replaced at its path; following the pod's own", "attachment", r.Attachment.String(), "from", r.Netns, "to", path)
	was := *r
	if err := s.follow(r, path); err != nil {
		return err
	}
	s.noteReplaced(was, path) // once: the record names path now
	return nil
}

// noteReplaced counts that r's path (r.Netns) was found naming another
// namespace and tells OnNetnsReplaced; followed is where r's own netns is
// verified now, "" when the record was dropped.
func (s *Store) noteReplaced(r Record, followed string) {
	outcome := ReplacedFollowed
	if followed == "" {
		outcome = ReplacedDropped
	}
	s.replaced.add(outcome)
	if s.onReplaced != nil {
		s.onReplaced(r, followed)
	}
}

// NetnsReplaced counts, by outcome, the records whose path was found
// naming another namespace than the one enrolled.
func (s *Store) NetnsReplaced() map[string]int {
	s.replaced.mu.Lock()
	defer s.replaced.mu.Unlock()
	out := make(map[string]int, len(ReplacedOutcomes))
	for _, k := range ReplacedOutcomes {
		out[k] = s.replaced.n[k]
	}
	return out
}
