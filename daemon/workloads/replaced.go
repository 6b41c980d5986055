package workloads

import (
	"fmt"

	"github.com/sluicemesh/sluice/daemon/podns"
)

// A record's path (the one its ADD named, a bind mount under the runtime's
// netns dir) that comes to name another namespace was replaced: someone
// mounted another netns at it. The agent cannot prove the new one is the
// pod's, so nothing is ever written to it; what it does is the outcome
// label of sluice_netns_replaced_total. A /proc/<pid> path naming another
// namespace is pid reuse, not a replacement, and is not counted.
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
