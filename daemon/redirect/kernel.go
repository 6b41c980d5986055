package redirect

import (
	"net/netip"

	"github.com/vishvananda/netns"
)

// Kernel is what the layers above redirect need of the kernel: program,
// remove and read back a pod's ruleset, and add or remove pod addresses in
// the host probe table. Netlink is the real one; redirecttest.Fake stands
// in for it where a test exercises the logic above the kernel (journal,
// ownership, rollback, reconcile) without root. The kernel tests of this
// package test Netlink itself.
type Kernel interface {
	// Apply programs r into ns in one transaction: all of it or nothing.
	// It returns the netns's nftables generation its commit made (0 if
	// unknown), for VerifySince.
	Apply(ns netns.NsHandle, r *Ruleset) (Gen, error)
	// Remove deletes this package's table (and routes, addresses) from ns;
	// one that is not there is not an error. had, when known, is the
	// ruleset last applied there (RemoveApplied); nil reads everything.
	Remove(ns netns.NsHandle, had *Ruleset) error
	// Verify returns one item per difference between ns and r, none when
	// the kernel holds exactly r.
	Verify(ns netns.NsHandle, r *Ruleset) ([]string, error)
	// VerifySince is Verify that may skip reading the table back while
	// the netns's generation is still since, at which it held exactly r;
	// it returns the generation to pass next time when there is no drift.
	VerifySince(ns netns.NsHandle, r *Ruleset, since Gen) ([]string, Gen, error)
	// AddHostIPs adds pod addresses to the host probe table in ns.
	AddHostIPs(ns netns.NsHandle, ips ...netip.Addr) error
	// RemoveHostIPs removes pod addresses from the host probe table in ns.
	RemoveHostIPs(ns netns.NsHandle, ips ...netip.Addr) error
}

// Gen is a netns's nftables generation: nf_tables' per-netns commit
// counter, moved on by every change to any table there. 0 is unknown.
type Gen uint32
