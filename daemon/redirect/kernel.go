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
	Apply(ns netns.NsHandle, r *Ruleset) error
	// Remove deletes this package's table (and routes, addresses) from ns;
	// one that is not there is not an error.
	Remove(ns netns.NsHandle) error
	// Verify returns one item per difference between ns and r, none when
	// the kernel holds exactly r.
	Verify(ns netns.NsHandle, r *Ruleset) ([]string, error)
	// AddHostIPs adds pod addresses to the host probe table in ns.
	AddHostIPs(ns netns.NsHandle, ips ...netip.Addr) error
	// RemoveHostIPs removes pod addresses from the host probe table in ns.
	RemoveHostIPs(ns netns.NsHandle, ips ...netip.Addr) error
}
