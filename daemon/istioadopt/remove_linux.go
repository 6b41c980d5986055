package istioadopt

import (
	"fmt"

	"github.com/google/nftables"
	"github.com/vishvananda/netns"
)

// Remove deletes c from ns in one nf_tables transaction: the jumps into
// Istio's chains, the chains (flushed first, so jumps between them go
// too), and Istio's native tables. The kernel applies all of it or none:
// should anything have changed since Detect (a rule gone, a new jump into
// an ISTIO_* chain, which makes the chain busy), the batch fails whole and
// Istio's capture is left exactly as it was.
//
// Istio's ip rules and routes (ambient's fwmark 0x111 lookup 100, TPROXY's
// table 133) and the ::6 address on lo are left: sluice's ruleset uses the
// same ones, and they steer only packets its rules mark.
func Remove(ns netns.NsHandle, c Capture) error {
	if !c.Found() {
		return nil
	}
	conn, err := dial(ns)
	if err != nil {
		return fmt.Errorf("remove istio-cni capture: %w", err)
	}
	for _, j := range c.Jumps {
		t := j.Table.nl()
		if err := conn.DelRule(&nftables.Rule{Table: t, Chain: &nftables.Chain{Name: j.Chain, Table: t}, Handle: j.Handle}); err != nil {
			return fmt.Errorf("remove istio-cni capture: rule %d in %s %s: %w", j.Handle, j.Table, j.Chain, err)
		}
	}
	for _, ch := range c.Chains {
		conn.FlushChain(&nftables.Chain{Name: ch.Name, Table: ch.Table.nl()})
	}
	for _, ch := range c.Chains {
		conn.DelChain(&nftables.Chain{Name: ch.Name, Table: ch.Table.nl()})
	}
	for _, t := range c.Tables {
		conn.DelTable(t.nl())
	}
	if err := conn.Flush(); err != nil {
		return fmt.Errorf("remove istio-cni capture (%s) from netns fd %d: %w", c, int(ns), err)
	}
	return nil
}
