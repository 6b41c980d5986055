package kernel

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/sluicemesh/sluice/daemon/redirect"
	"github.com/sluicemesh/sluice/daemon/redirect/kernel/internal/nftnl"
	"github.com/sluicemesh/sluice/daemon/redirect/nft"
	"github.com/sluicemesh/sluice/internal/nlsock"
)

// apply programs r into the network namespace ns: the table in one
// netlink transaction (nftnl.ApplyOn: create exclusively when absent, else
// replace), so the pod sees the old ruleset or the new one, never a table
// half built.
// Applying the same ruleset again leaves the kernel in the same state. Like
// nftnl.ApplyOn it never moves the caller's thread into ns, so it is safe to
// call from many goroutines at once. It returns the netns's nftables
// generation its commit made (0 if the kernel did not say), for
// verifySince.
//
// A ruleset with policy routes (TPROXY, ambient) or an address for lo
// (::6, IPv6 sidecars) has them programmed first (route_linux.go,
// addr_linux.go). That order is the safe one: a rule and route for a mark
// nothing sets yet change no packet's path, while nft rules that mark
// packets before their route exists would send marked replies out of the
// pod instead of back to the proxy. If any of that or the nft batch then
// fails, the rules, routes and addresses this Apply added are taken back,
// so a failed Apply leaves the netns as it found it.
//
// Routes and addresses a previous ruleset needed and this one does not are
// pruned after the batch. A fresh table means a new pod (or one Remove
// cleaned up), so a ruleset without either skips rtnetlink on that path.
//
// A pod whose lo has IPv6 disabled cannot hold IPv6 local routes or ::6
// (the kernel answers EACCES): those are left out and a warning logged,
// and the rest, IPv4 capture and the IPv6 nft rules (which then fail
// closed), is programmed; an IPv6-only ruleset fails instead.
func apply(ns netns.NsHandle, r *redirect.Ruleset) (redirect.Gen, error) {
	routes, addrs, err := programmableForApply(ns, r)
	if err != nil {
		return 0, err
	}
	// The netfilter socket, and rtnetlink when lo needs an address, are
	// opened in one visit to ns.
	socks, err := nlsock.Open(ns, applyProtocols(addrs)...)
	if err != nil {
		return 0, fmt.Errorf("apply to netns fd %d: %w", int(ns), err)
	}
	nf := socks[0]
	defer func() {
		if nf != nil {
			nf.Close()
		}
	}()
	b := &beside{ns: ns}
	if len(socks) > 1 {
		b.rt = socks[1].Conn()
	}
	defer b.close()
	if addrs, err = b.program(r, routes, addrs); err != nil {
		return 0, err
	}
	existed, gen, err := nftnl.ApplyOn(ns, nf, r.Table(), r.Render())
	nf = nil // ApplyOn closes it
	if err != nil {
		return 0, b.undo(err)
	}
	return redirect.Gen(gen), b.pruneAfter(existed, routes, addrs)
}

// applyProtocols are the netlink sockets an Apply opens in the pod's netns
// up front: netfilter, and rtnetlink when lo needs addresses.
func applyProtocols(addrs []netip.Addr) []int {
	if len(addrs) > 0 {
		return []int{unix.NETLINK_NETFILTER, unix.NETLINK_ROUTE}
	}
	return []int{unix.NETLINK_NETFILTER}
}

// beside is what an Apply programs beside the table (policy routes, lo's
// addresses) and what it added, to take back when the rest fails. One
// rtnetlink handle and one read of our routes serve the whole Apply,
// opened only when routes are wanted or may need pruning.
type beside struct {
	ns         netns.NsHandle
	rt         *nlsock.Conn // rtnetlink in ns: lo's addresses
	ours       *ourRoutes
	added      []policyRoute
	addedAddrs []netip.Addr
}

// program adds the policy routes, then lo's addresses, and returns the
// addresses ns can hold (none when lo has IPv6 disabled).
func (b *beside) program(r *redirect.Ruleset, routes []policyRoute, addrs []netip.Addr) ([]netip.Addr, error) {
	ns := b.ns
	var err error
	if len(routes) > 0 {
		if b.ours, err = openRoutes(ns); err != nil {
			return nil, fmt.Errorf("apply policy routes to netns fd %d: %w", int(ns), err)
		}
		if b.added, err = b.ours.ensure(routes); err != nil {
			return nil, b.undo(fmt.Errorf("apply policy routes to netns fd %d: %w", int(ns), err))
		}
	}
	if b.addedAddrs, err = ensureLoAddrs(b.rt, addrs); err != nil {
		if !errors.Is(err, unix.EACCES) || len(b.addedAddrs) > 0 {
			return nil, b.undo(fmt.Errorf("apply addresses to %s in netns fd %d: %w", redirect.LoopbackInterface, int(ns), err))
		}
		// lo has IPv6 disabled (programmableForApply did not ask).
		if _, addrs, err = ipv6Off(ns, r); err != nil {
			return nil, b.undo(err)
		}
	}
	return addrs, nil
}

// undo takes back what program added and returns err with what that
// could not take back.
func (b *beside) undo(err error) error {
	var uerr error
	if len(b.added) > 0 {
		uerr = b.ours.undo(b.added)
	}
	if len(b.addedAddrs) > 0 {
		uerr = errors.Join(uerr, undoLoAddrs(b.rt, b.addedAddrs))
	}
	if uerr != nil {
		return errors.Join(err, fmt.Errorf("after the failed apply, in netns fd %d: %w", int(b.ns), uerr))
	}
	return err
}

func (b *beside) close() {
	if b.rt != nil {
		b.rt.Close()
	}
	if b.ours != nil {
		b.ours.close()
	}
}

// pruneAfter removes the routes and lo addresses of ours a previous
// ruleset needed and this one does not. A fresh table means a new pod (or
// one Remove cleaned up): its routes are pruned only when this Apply read
// them anyway, and lo's addresses not at all, which spared every IPv6
// sidecar ADD an address dump. Should a Remove have died between the table
// and the addresses, Verify names the address left over and the reassert,
// which finds the table, prunes it.
func (b *beside) pruneAfter(existed bool, routes []policyRoute, addrs []netip.Addr) error {
	if !existed {
		if b.ours != nil {
			return b.pruneRoutes(routes)
		}
		return nil
	}
	ns := b.ns
	var err error
	if b.rt == nil {
		if b.rt, err = routeConn(ns); err != nil {
			return fmt.Errorf("prune in netns fd %d: %w", int(ns), err)
		}
	}
	if b.ours == nil {
		if b.ours, err = openRoutesIfAny(ns, b.rt); err != nil {
			return fmt.Errorf("prune policy routes in netns fd %d: %w", int(ns), err)
		}
	}
	if err := b.pruneRoutes(routes); err != nil {
		return err
	}
	if err := pruneLoAddrs(b.rt, addrs); err != nil {
		return fmt.Errorf("prune addresses on %s in netns fd %d: %w", redirect.LoopbackInterface, int(ns), err)
	}
	return nil
}

// pruneRoutes prunes the rules and routes b.ours read, if it read any.
func (b *beside) pruneRoutes(keep []policyRoute) error {
	if b.ours == nil {
		return nil
	}
	if err := b.ours.prune(keep); err != nil {
		return fmt.Errorf("prune policy routes in netns fd %d: %w", int(b.ns), err)
	}
	return nil
}

// programmable is r's routes and lo addresses that ns can hold: without
// IPv6 on lo, the IPv4 ones only (logged), or an error when that leaves
// nothing to capture with.
func programmable(ns netns.NsHandle, r *redirect.Ruleset) ([]policyRoute, []netip.Addr, error) {
	if !needsLoIPv6(r) {
		return routesOf(r), r.LoopbackAddrs(), nil
	}
	_, have, err := loState(ns)
	if err != nil {
		return nil, nil, err
	}
	return programmableWith(ns, r, have)
}

// programmableWith is programmable given lo's IPv6 addresses. lo holds an
// IPv6 address (::1 at least) only while IPv6 is on, so the address dump
// answers it; only a lo with none (IPv6 off, or lo down) costs the sysctl
// read, a thread moved into ns, which profiled as half of a start-up
// verify.
func programmableWith(ns netns.NsHandle, r *redirect.Ruleset, have []loAddr) ([]policyRoute, []netip.Addr, error) {
	if !needsLoIPv6(r) || len(have) > 0 {
		return routesOf(r), r.LoopbackAddrs(), nil
	}
	off, err := loIPv6Disabled(ns)
	if err != nil {
		return nil, nil, err
	}
	if !off {
		return routesOf(r), r.LoopbackAddrs(), nil
	}
	return ipv6Off(ns, r)
}

// programmableForApply is programmable, but asks the sysctl only when IPv6
// routes depend on it, as they are programmed before anything else: lo's
// addresses are simply tried, and the kernel's EACCES for an IPv6 address
// on a lo without IPv6 leads Apply to ipv6Off. That spares every IPv6
// sidecar ADD a thread moved into the pod's netns to read /proc/sys.
func programmableForApply(ns netns.NsHandle, r *redirect.Ruleset) ([]policyRoute, []netip.Addr, error) {
	if !containsFunc(r.Routes(), isIPv6) {
		return routesOf(r), r.LoopbackAddrs(), nil
	}
	return programmable(ns, r)
}

// ipv6Off is what ns can hold when lo has IPv6 disabled.
func ipv6Off(ns netns.NsHandle, r *redirect.Ruleset) ([]policyRoute, []netip.Addr, error) {
	if !r.IPv4() {
		return nil, nil, fmt.Errorf("netns fd %d: IPv6-only capture, but %s has IPv6 disabled (disable_ipv6=1)", int(ns), redirect.LoopbackInterface)
	}
	var routes []policyRoute
	for _, rt := range routesOf(r) {
		if rt.Family == nft.IPv4 {
			routes = append(routes, rt)
		}
	}
	slog.Warn("lo has IPv6 disabled: IPv6 local routes and addresses left out, IPv4 capture programmed",
		"netns_fd", int(ns), "skipped_routes", len(r.Routes())-len(routes), "skipped_addresses", len(r.LoopbackAddrs()))
	return routes, nil, nil
}

func needsLoIPv6(r *redirect.Ruleset) bool {
	return len(r.LoopbackAddrs()) > 0 || containsFunc(r.Routes(), isIPv6)
}

func isIPv6(rt redirect.PolicyRoute) bool { return rt.Family == nft.IPv6 }

// remove deletes table inet sluice from ns, then the policy routes and lo
// addresses apply added there (the reverse of apply's order, for the same
// reason). A table that is not there is not an error.
//
// had, when known, is the ruleset last applied to ns. apply adds routes
// and lo addresses only for a ruleset that has them (and takes back what
// it added when it fails), so what had lacks is not read back:
// without routes (every sidecar but TPROXY) the two route dumps are
// skipped, without lo addresses (IPv4 sidecars) the address dump too, and
// with neither rtnetlink is never opened. An address of ours is found by
// the dump, never deleted blind: a ::6 the pod had is the pod's. A nil had
// (GC, repair, a spec this build cannot make a ruleset of) reads all of
// it. What an older ruleset left (an agent killed mid-Remove, then a
// re-ADD of the same netns without it) stays: a rule for a mark nothing
// sets and ::6 on lo change no packet's path.
func remove(ns netns.NsHandle, had *redirect.Ruleset) error {
	routes := had == nil || len(had.Routes()) > 0
	addrs := had == nil || len(had.LoopbackAddrs()) > 0
	protocols := []int{unix.NETLINK_NETFILTER}
	if routes || addrs {
		protocols = append(protocols, unix.NETLINK_ROUTE) // in the same visit to ns
	}
	socks, err := nlsock.Open(ns, protocols...)
	if err != nil {
		return fmt.Errorf("remove from netns fd %d: %w", int(ns), err)
	}
	if len(socks) > 1 {
		defer socks[1].Close()
	}
	if err := nftnl.RemoveOn(ns, socks[0], redirect.TableName); err != nil {
		return err
	}
	if routes {
		if err := removeRoutes(ns, socks[1].Conn()); err != nil {
			return fmt.Errorf("remove policy routes from netns fd %d: %w", int(ns), err)
		}
	}
	if addrs {
		if err := pruneLoAddrs(socks[1].Conn(), nil); err != nil {
			return fmt.Errorf("remove addresses from %s in netns fd %d: %w", redirect.LoopbackInterface, int(ns), err)
		}
	}
	return nil
}

// removeRoutes deletes every ip rule and route of ours in ns.
func removeRoutes(ns netns.NsHandle, rt *nlsock.Conn) error {
	ours, err := openRoutesIfAny(ns, rt)
	if err != nil || ours == nil {
		return err
	}
	defer ours.close()
	return ours.prune(nil)
}
