package nftnl

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/google/nftables"
	"github.com/vishvananda/netns"

	"github.com/sluicemesh/sluice/daemon/redirect/nft"
)

// Ensure creates or repairs t in ns in one transaction, keeping the
// elements its sets already hold: sets are added only if missing, and each
// chain is added if missing, flushed and written again, as kube-proxy
// re-asserts its chains. It is for a table whose set elements are managed
// apart from it (AddAddrs, RemoveAddrs); t's own elements are not sent.
func Ensure(ns netns.NsHandle, t *nft.Table) error {
	p := newProgram(t)
	batch, err := marshal(func(conn *nftables.Conn) error {
		conn.AddTable(p.table)
		for _, s := range p.sets {
			// No elements: adding an existing set of the same type is a
			// no-op and leaves its elements alone.
			if err := conn.AddSet(s, nil); err != nil {
				return fmt.Errorf("add set %s: %w", s.Name, err)
			}
		}
		for _, c := range p.chains {
			conn.AddChain(c)
			conn.FlushChain(c)
		}
		for _, rl := range p.rules {
			conn.AddRule(rl)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("ensure table inet %s: %w", t.Name, err)
	}
	s, err := open(ns)
	if err != nil {
		return fmt.Errorf("ensure table inet %s: %w", t.Name, err)
	}
	defer closeLater(s)
	if _, err := s.send(batch); err != nil {
		return fmt.Errorf("ensure table inet %s in netns fd %d: %w", t.Name, int(ns), err)
	}
	return nil
}

// AddAddrs adds addresses to sets of table inet table in ns, in one
// transaction; one already there is not an error. The table and its sets
// must exist (Ensure).
func AddAddrs(ns netns.NsHandle, table string, sets ...nft.Addrs) error {
	return changeAddrs(ns, table, false, sets)
}

// RemoveAddrs removes addresses from sets of table inet table in ns, in
// one transaction; one that is not there is not an error.
func RemoveAddrs(ns netns.NsHandle, table string, sets ...nft.Addrs) error {
	return changeAddrs(ns, table, true, sets)
}

func changeAddrs(ns netns.NsHandle, table string, remove bool, sets []nft.Addrs) error {
	verb := "add"
	if remove {
		verb = "remove"
	}
	if !slices.ContainsFunc(sets, func(x nft.Addrs) bool { return len(x.Addrs) > 0 }) {
		return nil
	}
	nt := nlTable(table)
	var all []netip.Addr
	batch, err := marshal(func(conn *nftables.Conn) error {
		for _, x := range sets {
			if len(x.Addrs) == 0 {
				continue
			}
			elems := make([]nftables.SetElement, len(x.Addrs))
			for i, a := range x.Addrs {
				elems[i] = nftables.SetElement{Key: a.AsSlice()}
			}
			all = append(all, x.Addrs...)
			s := &nftables.Set{Table: nt, Name: x.Set}
			// Adding first makes the delete valid whether or not the
			// element was there, as Remove does for the table: still one
			// transaction.
			if err := conn.SetAddElements(s, elems); err != nil {
				return fmt.Errorf("%s addresses in set %s: %w", verb, x.Set, err)
			}
			if remove {
				if err := conn.SetDeleteElements(s, elems); err != nil {
					return fmt.Errorf("%s addresses in set %s: %w", verb, x.Set, err)
				}
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	s, err := open(ns)
	if err != nil {
		return fmt.Errorf("%s addresses in table inet %s: %w", verb, table, err)
	}
	defer closeLater(s)
	if _, err := s.send(batch); err != nil {
		return fmt.Errorf("%s addresses %v in table inet %s in netns fd %d: %w", verb, all, table, int(ns), err)
	}
	return nil
}
