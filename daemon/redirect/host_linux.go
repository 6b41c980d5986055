package redirect

import (
	"fmt"
	"net/netip"

	"github.com/google/nftables"
	"github.com/vishvananda/netns"
)

// EnsureHostTable creates or repairs table inet sluice-host in ns (the
// node's netns) for cfg, in one transaction, keeping the pod addresses the
// sets already hold: sets are added only if missing, and the chain is
// added if missing, flushed and written again, as kube-proxy re-asserts its
// chains. Calling it on every agent start is cheap and safe.
func EnsureHostTable(ns netns.NsHandle, cfg HostConfig) error {
	r, err := BuildHost(cfg)
	if err != nil {
		return err
	}
	conn, err := dial(ns, nftables.AsLasting())
	if err != nil {
		return fmt.Errorf("ensure table inet %s: %w", HostTableName, err)
	}
	defer closeLater(conn)
	p := newProgram(r)
	conn.AddTable(p.table)
	for _, s := range p.sets {
		// No elements: adding an existing set of the same type is a no-op
		// and leaves its elements alone.
		if err := conn.AddSet(s, nil); err != nil {
			return fmt.Errorf("ensure table inet %s: add set %s: %w", HostTableName, s.Name, err)
		}
	}
	for _, c := range p.chains {
		conn.AddChain(c)
		conn.FlushChain(c)
	}
	for _, rl := range p.rules {
		conn.AddRule(rl)
	}
	if err := conn.Flush(); err != nil {
		return fmt.Errorf("ensure table inet %s in netns fd %d: %w", HostTableName, int(ns), err)
	}
	return nil
}

// AddHostIPs adds pod addresses to the host table's sets; one already
// there is not an error. The table must exist (EnsureHostTable).
func AddHostIPs(ns netns.NsHandle, ips ...netip.Addr) error {
	return changeHostIPs(ns, false, ips)
}

// RemoveHostIPs removes pod addresses from the host table's sets; one that
// is not there is not an error.
func RemoveHostIPs(ns netns.NsHandle, ips ...netip.Addr) error {
	return changeHostIPs(ns, true, ips)
}

// RemoveHostTable deletes table inet sluice-host from ns; a missing table
// is not an error.
func RemoveHostTable(ns netns.NsHandle) error {
	return removeTable(ns, HostTableName)
}

func changeHostIPs(ns netns.NsHandle, remove bool, ips []netip.Addr) error {
	verb := "add"
	if remove {
		verb = "remove"
	}
	byset := map[string][]nftables.SetElement{}
	for _, ip := range ips {
		ip = ip.Unmap()
		if !ip.IsValid() {
			return fmt.Errorf("%s pod address in table inet %s: invalid address", verb, HostTableName)
		}
		byset[hostSet(ip)] = append(byset[hostSet(ip)], nftables.SetElement{Key: ip.AsSlice()})
	}
	if len(byset) == 0 {
		return nil
	}
	conn, err := dial(ns)
	if err != nil {
		return fmt.Errorf("%s pod addresses in table inet %s: %w", verb, HostTableName, err)
	}
	table := nlTable(HostTableName)
	for _, name := range []string{setHostPodsV4, setHostPodsV6} {
		elems := byset[name]
		if len(elems) == 0 {
			continue
		}
		s := &nftables.Set{Table: table, Name: name}
		// Adding first makes the delete valid whether or not the element
		// was there, as Remove does for the table: still one transaction.
		if err := conn.SetAddElements(s, elems); err != nil {
			return fmt.Errorf("%s pod addresses in set %s: %w", verb, name, err)
		}
		if remove {
			if err := conn.SetDeleteElements(s, elems); err != nil {
				return fmt.Errorf("%s pod addresses in set %s: %w", verb, name, err)
			}
		}
	}
	if err := conn.Flush(); err != nil {
		return fmt.Errorf("%s pod addresses %v in table inet %s in netns fd %d: %w", verb, ips, HostTableName, int(ns), err)
	}
	return nil
}
