package kernel

import (
	"net/netip"

	"github.com/vishvananda/netns"

	"github.com/sluicemesh/sluice/daemon/redirect"
)

// Netlink is the Kernel that programs nftables, policy routes and
// addresses over netlink (apply_linux.go, verify_linux.go, host_linux.go).
// It holds no state.
type Netlink struct{}

var _ redirect.Kernel = Netlink{}

// Apply programs r into ns (apply).
func (Netlink) Apply(ns redirect.Netns, r *redirect.Ruleset) (redirect.Gen, error) {
	return apply(netns.NsHandle(ns), r)
}

// Remove deletes table inet sluice from ns, and what Apply added beside it
// (remove).
func (Netlink) Remove(ns redirect.Netns, had *redirect.Ruleset) error {
	return remove(netns.NsHandle(ns), had)
}

// Verify reports how ns differs from r (verifySince).
func (Netlink) Verify(ns redirect.Netns, r *redirect.Ruleset) ([]string, error) {
	drift, _, err := verifySince(netns.NsHandle(ns), r, 0)
	return drift, err
}

// VerifySince is Verify that trusts since while the netns's nftables
// generation has not moved (verifySince).
func (Netlink) VerifySince(ns redirect.Netns, r *redirect.Ruleset, since redirect.Gen) ([]string, redirect.Gen, error) {
	return verifySince(netns.NsHandle(ns), r, since)
}

// AddHostIPs adds pod addresses to the host table's sets (host_linux.go).
func (Netlink) AddHostIPs(ns redirect.Netns, ips ...netip.Addr) error {
	return changeHostIPs(netns.NsHandle(ns), false, ips)
}

// RemoveHostIPs removes pod addresses from the host table's sets.
func (Netlink) RemoveHostIPs(ns redirect.Netns, ips ...netip.Addr) error {
	return changeHostIPs(netns.NsHandle(ns), true, ips)
}
