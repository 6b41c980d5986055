package redirect

import (
	"fmt"

	"github.com/google/nftables"
	"github.com/vishvananda/netns"
)

// Apply programs r into the network namespace ns as one netlink batch:
// add table, delete table, add table, then sets, chains and rules. Adding
// first makes the delete valid whether or not the table exists, so there is
// no read round trip, and the kernel commits the batch as one transaction:
// the pod sees the old ruleset or the new one, never a table half built.
// Applying the same ruleset again leaves the kernel in the same state.
//
// The netlink socket is opened inside ns by google/nftables (through
// mdlayher/socket), on a locked thread of its own that is moved back before
// it is released; the caller's thread never changes namespace, so Apply is
// safe to call from many goroutines at once.
func Apply(ns netns.NsHandle, r *Ruleset) error {
	conn, err := dial(ns)
	if err != nil {
		return fmt.Errorf("apply table inet %s: %w", TableName, err)
	}
	conn.AddTable(table)
	conn.DelTable(table)
	conn.AddTable(table)
	p := newProgram(r)
	for i, s := range p.sets {
		if err := conn.AddSet(s, p.elems[i]); err != nil {
			return fmt.Errorf("apply table inet %s to netns fd %d: add set %s: %w", TableName, int(ns), s.Name, err)
		}
	}
	// Every chain exists before the first rule, so jumps always resolve.
	for _, c := range p.chains {
		conn.AddChain(c)
	}
	for _, rl := range p.rules {
		conn.AddRule(rl)
	}
	if err := conn.Flush(); err != nil {
		return fmt.Errorf("apply table inet %s to netns fd %d: %w", TableName, int(ns), err)
	}
	return nil
}

// Remove deletes table inet sluice from ns. A table that is not there is
// not an error: add-then-delete in one batch makes both cases the same.
func Remove(ns netns.NsHandle) error {
	conn, err := dial(ns)
	if err != nil {
		return fmt.Errorf("remove table inet %s: %w", TableName, err)
	}
	conn.AddTable(table)
	conn.DelTable(table)
	if err := conn.Flush(); err != nil {
		return fmt.Errorf("remove table inet %s from netns fd %d: %w", TableName, int(ns), err)
	}
	return nil
}

// dial makes a connection bound to ns. google/nftables treats fd 0 as
// "the calling thread's namespace", so a closed or zero handle would
// silently program the agent's own netns; refuse it instead.
func dial(ns netns.NsHandle, opts ...nftables.ConnOption) (*nftables.Conn, error) {
	if int(ns) <= 0 {
		return nil, fmt.Errorf("netns handle %d is not an open namespace", int(ns))
	}
	conn, err := nftables.New(append([]nftables.ConnOption{nftables.WithNetNSFd(int(ns))}, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("open netlink in netns fd %d: %w", int(ns), err)
	}
	return conn, nil
}

// program is a Ruleset as google/nftables values, in the order they are
// added to the kernel.
type program struct {
	sets   []*nftables.Set
	elems  [][]nftables.SetElement
	chains []*nftables.Chain
	rules  []*nftables.Rule
}

func newProgram(r *Ruleset) program {
	p := program{
		sets:   make([]*nftables.Set, len(r.sets)),
		elems:  make([][]nftables.SetElement, len(r.sets)),
		chains: make([]*nftables.Chain, len(r.chains)),
	}
	ids := make(map[string]uint32, len(r.sets))
	for i, s := range r.sets {
		ids[s.name] = uint32(i + 1)
		p.sets[i], p.elems[i] = nlSet(s, uint32(i+1))
	}
	for i, c := range r.chains {
		p.chains[i] = nlChain(c)
		for _, rl := range c.rules {
			p.rules = append(p.rules, &nftables.Rule{
				Table:    table,
				Chain:    p.chains[i],
				Exprs:    ruleExprs(rl, ids),
				UserData: ruleTag(rl.tag),
			})
		}
	}
	return p
}
