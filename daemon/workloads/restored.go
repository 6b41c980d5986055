package workloads

import (
	"strings"
	"sync"
)

// What a restore put back: the `what` label of
// sluice_capture_restored_total, so an operator can tell a flushed ruleset
// from flushed policy routes or a deleted host probe table.
const (
	RestoredRuleset   = "ruleset"          // the pod's nftables table, chains or rules
	RestoredRoutes    = "routes"           // its policy routes and ip rules (ambient)
	RestoredAddresses = "addresses"        // the addresses on its lo (ambient)
	RestoredHostTable = "host_probe_table" // the node's probe table (ambient), written again
)

// RestoredKinds lists every value of the label, each exported from the
// start so a rate() over it needs no first increment.
var RestoredKinds = []string{RestoredRuleset, RestoredRoutes, RestoredAddresses, RestoredHostTable}

// labelCounts counts by a metric label's value: restores by what they
// put back, replaced netns by what was done.
type labelCounts struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *labelCounts) add(kinds ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	for _, k := range kinds {
		c.n[k]++
	}
}

// Restored counts, by what was put back, the capture the store restored
// in running pods: a reassert counts each kind its drift named once.
func (s *Store) Restored() map[string]int {
	s.restored.mu.Lock()
	defer s.restored.mu.Unlock()
	out := make(map[string]int, len(RestoredKinds))
	for _, k := range RestoredKinds {
		out[k] = s.restored.n[k]
	}
	return out
}

// driftKinds names what a drift report (redirect.Kernel.VerifySince's
// lines) says was lost, each kind once.
func driftKinds(drift []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, d := range drift {
		k := RestoredRuleset
		switch {
		case strings.HasPrefix(d, "ip "), strings.HasPrefix(d, "route "):
			k = RestoredRoutes
		case strings.HasPrefix(d, "address "):
			k = RestoredAddresses
		}
		if !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	return out
}
