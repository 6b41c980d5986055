package redirect

import "net/netip"

// Kernel is what the layers above redirect need of the kernel: program,
// remove and read back a pod's ruleset, and add or remove pod addresses in
// the host probe table. kernel.Netlink (package redirect/kernel) is the
// real one; redirecttest.Fake stands in for it where a test exercises the
// logic above the kernel (journal, ownership, rollback, reconcile) without
// root. This package only describes what goes into the kernel, so a rule
// change is a pure change (deps_test.go).
type Kernel interface {
	// Apply programs r into ns in one transaction: all of it or nothing.
	// It returns the netns's nftables generation its commit made (0 if
	// unknown), for VerifySince.
	Apply(ns Netns, r *Ruleset) (Gen, error)
	// Remove deletes table inet sluice (and the routes, addresses Apply
	// added) from ns; one that is not there is not an error. had, when
	// known, is the ruleset last applied there; nil reads everything.
	Remove(ns Netns, had *Ruleset) error
	// Verify returns one item per difference between ns and r, none when
	// the kernel holds exactly r.
	Verify(ns Netns, r *Ruleset) ([]string, error)
	// VerifySince is Verify that may skip reading the table back while
	// the netns's generation is still since, at which it held exactly r;
	// it returns the generation to pass next time when there is no drift.
	VerifySince(ns Netns, r *Ruleset, since Gen) ([]string, Gen, error)
	// AddHostIPs adds pod addresses to the host probe table in ns.
	AddHostIPs(ns Netns, ips ...netip.Addr) error
	// RemoveHostIPs removes pod addresses from the host probe table in ns.
	RemoveHostIPs(ns Netns, ips ...netip.Addr) error
}

// Netns is an open network namespace, by its file descriptor: the value
// of a vishvananda/netns NsHandle, which converts to and from it
// (redirect.Netns(h), netns.NsHandle(ns)). It is its own type so this
// package needs neither that package nor x/sys/unix under it.
type Netns int

// Gen is a netns's nftables generation: nf_tables' per-netns commit
// counter, moved on by every change to any table there. 0 is unknown.
type Gen uint32
