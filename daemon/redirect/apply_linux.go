package redirect

import (
	"errors"
	"fmt"
	"sync"

	"github.com/google/nftables"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Apply programs r into the network namespace ns in one netlink
// transaction, so the pod sees the old ruleset or the new one, never a
// table half built. Applying the same ruleset again leaves the kernel in
// the same state.
//
// It first asks whether the table exists (one GET, no commit):
//   - absent, the common case of a new pod: one batch creates the table
//     exclusively (NLM_F_EXCL) with its sets, chains and rules. Nothing is
//     deleted, so the kernel has nothing to free after an RCU grace period.
//     Should the table appear between the GET and the batch, the batch
//     fails whole with EEXIST and Apply falls through to the replace.
//   - present: one batch adds, deletes and re-adds the table, then fills it.
//
// Deleting anything in nf_tables queues the old objects for release after
// a grace period, and closing a netfilter netlink socket waits for every
// queued release in the kernel (nft_rcv_nl_event flushes the release work),
// ~10 ms, also for releases other netns queued. The transaction has
// committed before the kernel acks it, so the socket is closed off the
// caller's path (closeLater).
//
// The netlink socket is opened inside ns by google/nftables (through
// mdlayher/socket), on a locked thread of its own that is moved back before
// it is released; the caller's thread never changes namespace, so Apply is
// safe to call from many goroutines at once.
//
// A ruleset with policy routes (TPROXY, ambient) has them programmed first
// (route_linux.go). That order is the safe one: a rule and route for a mark
// nothing sets yet change no packet's path, while nft rules that mark
// packets before their route exists would send marked replies out of the
// pod instead of back to the proxy. If the nft batch then fails, the routes
// stay inert and the next Apply or Remove converges them.
//
// Routes a previous ruleset needed and this one does not are pruned after
// the batch. A fresh table means a new pod (or one Remove cleaned up), so
// a ruleset without routes skips rtnetlink altogether on that path.
func Apply(ns netns.NsHandle, r *Ruleset) error {
	if len(r.routes) > 0 {
		if err := ensureRoutes(ns, r.routes); err != nil {
			return fmt.Errorf("apply policy routes to netns fd %d: %w", int(ns), err)
		}
	}
	existed, err := applyTable(ns, r)
	if err != nil {
		return err
	}
	if existed || len(r.routes) > 0 {
		if err := pruneRoutes(ns, r.routes); err != nil {
			return fmt.Errorf("prune policy routes in netns fd %d: %w", int(ns), err)
		}
	}
	return nil
}

// applyTable is Apply's nftables part; it reports whether the table was
// there before.
func applyTable(ns netns.NsHandle, r *Ruleset) (existed bool, err error) {
	conn, err := dial(ns, nftables.AsLasting())
	if err != nil {
		return false, fmt.Errorf("apply table inet %s: %w", r.table, err)
	}
	defer closeLater(conn)
	p := newProgram(r)
	exists, err := tableExists(conn, p.table)
	if err != nil {
		return false, fmt.Errorf("apply table inet %s to netns fd %d: %w", r.table, int(ns), err)
	}
	if !exists {
		err = commit(conn, p, false)
		if !errors.Is(err, unix.EEXIST) {
			if err != nil {
				return false, fmt.Errorf("apply table inet %s to netns fd %d: %w", r.table, int(ns), err)
			}
			return false, nil
		}
	}
	if err := commit(conn, p, true); err != nil {
		return true, fmt.Errorf("apply table inet %s to netns fd %d: %w", r.table, int(ns), err)
	}
	return true, nil
}

// commit sends p as one batch. replace deletes whatever table is there
// first (add, delete, add: the add makes the delete valid either way);
// otherwise the table is created exclusively and the batch fails with
// EEXIST if it already exists.
func commit(conn *nftables.Conn, p program, replace bool) error {
	if replace {
		conn.AddTable(p.table)
		conn.DelTable(p.table)
		conn.AddTable(p.table)
	} else {
		conn.CreateTable(p.table)
	}
	for i, s := range p.sets {
		if err := conn.AddSet(s, p.elems[i]); err != nil {
			return fmt.Errorf("add set %s: %w", s.Name, err)
		}
	}
	// Every chain exists before the first rule, so jumps always resolve.
	for _, c := range p.chains {
		conn.AddChain(c)
	}
	for _, rl := range p.rules {
		conn.AddRule(rl)
	}
	return conn.Flush()
}

// tableExists asks the kernel for the table by name.
func tableExists(conn *nftables.Conn, table *nftables.Table) (bool, error) {
	_, err := conn.ListTableOfFamily(table.Name, nftables.TableFamilyINet)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, unix.ENOENT):
		return false, nil
	}
	return false, fmt.Errorf("get table: %w", err)
}

// Remove deletes table inet sluice from ns, then the policy routes Apply
// added there (the reverse of Apply's order, for the same reason). A table
// that is not there is not an error, and costs one GET and no commit.
func Remove(ns netns.NsHandle) error {
	if err := removeTable(ns, TableName); err != nil {
		return err
	}
	if err := pruneRoutes(ns, nil); err != nil {
		return fmt.Errorf("remove policy routes from netns fd %d: %w", int(ns), err)
	}
	return nil
}

func removeTable(ns netns.NsHandle, name string) error {
	conn, err := dial(ns, nftables.AsLasting())
	if err != nil {
		return fmt.Errorf("remove table inet %s: %w", name, err)
	}
	defer closeLater(conn)
	table := nlTable(name)
	exists, err := tableExists(conn, table)
	if err != nil {
		return fmt.Errorf("remove table inet %s from netns fd %d: %w", name, int(ns), err)
	}
	if !exists {
		return nil
	}
	// Add before delete, so a table someone removed since the GET is not
	// an error either.
	conn.AddTable(table)
	conn.DelTable(table)
	if err := conn.Flush(); err != nil {
		return fmt.Errorf("remove table inet %s from netns fd %d: %w", name, int(ns), err)
	}
	return nil
}

// closing hands netlink sockets to one goroutine that closes them. Closing
// can block for an RCU grace period (see Apply) while nothing the caller
// needs is left to happen; one closer keeps that to one blocked thread. A
// full queue closes inline, so a storm slows down rather than piles up.
var (
	closing     = make(chan *nftables.Conn, 1024)
	closerStart sync.Once
)

func closeLater(conn *nftables.Conn) {
	closerStart.Do(func() {
		go func() {
			for c := range closing {
				_ = c.CloseLasting()
			}
		}()
	})
	select {
	case closing <- conn:
	default:
		_ = conn.CloseLasting()
	}
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
	table  *nftables.Table
	sets   []*nftables.Set
	elems  [][]nftables.SetElement
	chains []*nftables.Chain
	rules  []*nftables.Rule
}

func newProgram(r *Ruleset) program {
	table := nlTable(r.table)
	p := program{
		table:  table,
		sets:   make([]*nftables.Set, len(r.sets)),
		elems:  make([][]nftables.SetElement, len(r.sets)),
		chains: make([]*nftables.Chain, len(r.chains)),
	}
	ids := make(map[string]uint32, len(r.sets))
	for i, s := range r.sets {
		ids[s.name] = uint32(i + 1)
		p.sets[i], p.elems[i] = nlSet(table, s, uint32(i+1))
	}
	for i, c := range r.chains {
		p.chains[i] = nlChain(table, c)
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
