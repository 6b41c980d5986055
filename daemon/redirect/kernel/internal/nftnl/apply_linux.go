package nftnl

import (
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/google/nftables"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/sluicemesh/sluice/daemon/redirect/nft"
	"github.com/sluicemesh/sluice/internal/nlsock"
)

// ApplyOn programs t into the network namespace ns in one netlink
// transaction, so whoever lives there sees the old table or the new one,
// never one half built, and reports whether a table of that name was there
// before. Applying the same table again leaves the kernel in the same state.
//
// It first asks whether the table exists (one GET, no commit):
//   - absent, the common case of a new pod: one batch creates the table
//     exclusively (NLM_F_EXCL) with its sets, chains and rules. Nothing is
//     deleted, so the kernel has nothing to free after an RCU grace period.
//     Should the table appear between the GET and the batch, the batch
//     fails whole with EEXIST and ApplyOn falls through to the replace.
//   - present: one batch adds, deletes and re-adds the table, then fills it.
//
// Deleting anything in nf_tables queues the old objects for release after
// a grace period, and closing a netfilter netlink socket waits for every
// queued release in the kernel (nft_rcv_nl_event flushes the release work),
// ~10 ms, also for releases other netns queued. The transaction has
// committed before the kernel acks it, so the socket is closed off the
// caller's path (closeLater). The batch asks for one ACK (batch_linux.go).
//
// The netlink socket is opened inside ns on a locked thread of its own
// that is moved back before it is released (nlsock); the caller's
// thread never changes namespace, so ApplyOn is safe to call from many
// goroutines at once.
//
// nf is a NETLINK_NETFILTER socket the caller opened in ns (nlsock.Open,
// with the other sockets it needs there, in one visit to ns); ApplyOn owns
// it from then on and closes it. text is t's rendering: it keys the batch
// cache (batchcache_linux.go), and any text that contains t.Render() will
// do, as a hit is checked against t itself.
func ApplyOn(ns netns.NsHandle, nf *nlsock.Sock, t *nft.Table, text string) (existed bool, gen uint32, err error) {
	s := &socket{nl: nf.Conn()}
	defer closeLater(s)
	create, err := batches.batchFor(t, text, false)
	if err != nil {
		return false, 0, fmt.Errorf("apply table inet %s: %w", t.Name, err)
	}
	exists, err := s.tableExists(t.Name)
	if err != nil {
		return false, 0, fmt.Errorf("apply table inet %s to netns fd %d: %w", t.Name, int(ns), err)
	}
	if !exists {
		gen, err = s.send(create)
		if !errors.Is(err, unix.EEXIST) {
			if err != nil {
				return false, 0, fmt.Errorf("apply table inet %s to netns fd %d: %w", t.Name, int(ns), err)
			}
			return false, gen, nil
		}
		// The failed batch's other replies may still be queued on s.
		if s, err = open(ns); err != nil {
			return true, 0, fmt.Errorf("apply table inet %s: %w", t.Name, err)
		}
		defer closeLater(s)
	}
	replace, err := batches.batchFor(t, text, true)
	if err != nil {
		return true, 0, fmt.Errorf("apply table inet %s: %w", t.Name, err)
	}
	if gen, err = s.send(replace); err != nil {
		return true, 0, fmt.Errorf("apply table inet %s to netns fd %d: %w", t.Name, int(ns), err)
	}
	return true, gen, nil
}

// build adds p to c as one batch. replace deletes whatever table is there
// first (add, delete, add: the add makes the delete valid either way);
// otherwise the table is created exclusively and the batch fails with
// EEXIST if it already exists.
func (p program) build(conn *nftables.Conn, replace bool) error {
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
	return nil
}

// Remove deletes table inet name from ns. A table that is not there is not
// an error, and costs one GET and no commit.
func Remove(ns netns.NsHandle, name string) error {
	socks, err := nlsock.Open(ns, unix.NETLINK_NETFILTER)
	if err != nil {
		return fmt.Errorf("remove table inet %s: %w", name, err)
	}
	return RemoveOn(ns, socks[0], name)
}

// RemoveOn is Remove over nf, a NETLINK_NETFILTER socket the caller opened
// in ns (nlsock.Open); RemoveOn owns nf from then on and closes it.
func RemoveOn(ns netns.NsHandle, nf *nlsock.Sock, name string) error {
	s := &socket{nl: nf.Conn()}
	defer closeLater(s)
	// No look first: a DEL finds its table there, and the batch fails
	// whole, committing nothing, when it is not.
	batch, err := removeBatches.batchFor(name)
	if err == nil {
		err = s.sendQuiet(batch)
	}
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("remove table inet %s from netns fd %d: %w", name, int(ns), err)
	}
	return nil
}

// closing hands netlink sockets to one goroutine that closes them. Closing
// can block for an RCU grace period (see ApplyOn) while nothing the caller
// needs is left to happen; one closer keeps that to one blocked thread. A
// full queue closes inline, so a storm slows down rather than piles up.
var (
	closing     = make(chan io.Closer, 1024)
	closerStart sync.Once
)

func closeLater(s io.Closer) {
	closerStart.Do(func() {
		go func() {
			for s := range closing {
				_ = s.Close()
			}
		}()
	})
	select {
	case closing <- s:
	default:
		_ = s.Close()
	}
}

// program is a Table as google/nftables values, in the order they are
// added to the kernel.
type program struct {
	table  *nftables.Table
	sets   []*nftables.Set
	elems  [][]nftables.SetElement
	chains []*nftables.Chain
	rules  []*nftables.Rule
}

func newProgram(t *nft.Table) program {
	table := nlTable(t.Name)
	p := program{
		table:  table,
		sets:   make([]*nftables.Set, len(t.Sets)),
		elems:  make([][]nftables.SetElement, len(t.Sets)),
		chains: make([]*nftables.Chain, len(t.Chains)),
	}
	ids := make(map[string]uint32, len(t.Sets))
	for i, s := range t.Sets {
		ids[s.Name] = uint32(i + 1)
		p.sets[i], p.elems[i] = nlSet(table, s, uint32(i+1))
	}
	for i, c := range t.Chains {
		p.chains[i] = nlChain(table, c)
		for _, rl := range c.Rules {
			p.rules = append(p.rules, &nftables.Rule{
				Table:    table,
				Chain:    p.chains[i],
				Exprs:    ruleExprs(rl, ids),
				UserData: ruleTag(rl.Tag),
			})
		}
	}
	return p
}
