package redirect

import (
	"net/netip"

	"github.com/vishvananda/netns"
)

// Netlink is the Kernel that programs nftables, policy routes and
// addresses over netlink (Apply, Remove, Verify, AddHostIPs and
// RemoveHostIPs in this package). It holds no state.
type Netlink struct{}

var _ Kernel = Netlink{}

func (Netlink) Apply(ns netns.NsHandle, r *Ruleset) (Gen, error) { return ApplyGen(ns, r) }

func (Netlink) Remove(ns netns.NsHandle, had *Ruleset) error { return RemoveApplied(ns, had) }

func (Netlink) Verify(ns netns.NsHandle, r *Ruleset) ([]string, error) { return Verify(ns, r) }

func (Netlink) VerifySince(ns netns.NsHandle, r *Ruleset, since Gen) ([]string, Gen, error) {
	return VerifySince(ns, r, since)
}

func (Netlink) AddHostIPs(ns netns.NsHandle, ips ...netip.Addr) error { return AddHostIPs(ns, ips...) }

func (Netlink) RemoveHostIPs(ns netns.NsHandle, ips ...netip.Addr) error {
	return RemoveHostIPs(ns, ips...)
}
