package workloads

import (
	"slices"
	"strings"
)

// CountByMode counts enrolled workloads by capture mode.
func (s *Store) CountByMode() map[string]int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := map[string]int{}
	for _, r := range s.recs {
		out[string(r.Spec.Mode)]++
	}
	return out
}

// forget drops a record whose kernel state failed to apply.
// List returns the enrolled records sorted by attachment.
func (s *Store) List() []Record {
	s.mu.RLock()
	out := make([]Record, 0, len(s.recs))
	for _, r := range s.recs {
		out = append(out, *r)
	}
	s.mu.RUnlock()
	slices.SortFunc(out, func(a, b Record) int {
		return strings.Compare(a.Attachment.String(), b.Attachment.String())
	})
	return out
}

// Get returns one record. An empty ifName matches the container's first
// (by interface name). It is a map lookup, not a List: every ADD asks, and
// sorting 5,000 records for it made an ADD at 5,000 pods four times one
// at 10 (docs/benchmarks.md, section 6).
func (s *Store) Get(a Attachment) (Record, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if a.IfName != "" {
		if r := s.recs[a]; r != nil {
			return *r, true
		}
		return Record{}, false
	}
	var first *Record
	for _, r := range s.recs {
		if r.ContainerID == a.ContainerID && (first == nil || r.IfName < first.IfName) {
			first = r
		}
	}
	if first == nil {
		return Record{}, false
	}
	return *first, true
}

// PodEnrolled says whether any attachment of the pod is enrolled. A scan,
// for the rare paths that need it (an ambient ADD ztunnel refused: its
// rollback may have left the pod captured by what it had).
func (s *Store) PodEnrolled(podUID string) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, r := range s.recs {
		if r.PodUID == podUID {
			return true
		}
	}
	return false
}
