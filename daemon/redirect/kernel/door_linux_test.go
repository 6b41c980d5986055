package kernel

import (
	"net/netip"

	"github.com/vishvananda/netns"

	"github.com/sluicemesh/sluice/daemon/redirect"
)

// The tests go through the door, Netlink, with the handles nstest gives.

func applyIn(h netns.NsHandle, r *redirect.Ruleset) error {
	_, err := Netlink{}.Apply(redirect.Netns(h), r)
	return err
}

func verifyIn(h netns.NsHandle, r *redirect.Ruleset) ([]string, error) {
	return Netlink{}.Verify(redirect.Netns(h), r)
}

// removeIn is Remove not knowing what was applied: it reads everything.
func removeIn(h netns.NsHandle) error { return Netlink{}.Remove(redirect.Netns(h), nil) }

func removeAppliedIn(h netns.NsHandle, had *redirect.Ruleset) error {
	return Netlink{}.Remove(redirect.Netns(h), had)
}

func ensureHostTableIn(h netns.NsHandle, cfg redirect.HostConfig) error {
	return Netlink{}.EnsureHostTable(redirect.Netns(h), cfg)
}

func removeHostTableIn(h netns.NsHandle) error { return Netlink{}.RemoveHostTable(redirect.Netns(h)) }

func addHostIPsIn(h netns.NsHandle, ips ...netip.Addr) error {
	return Netlink{}.AddHostIPs(redirect.Netns(h), ips...)
}

func removeHostIPsIn(h netns.NsHandle, ips ...netip.Addr) error {
	return Netlink{}.RemoveHostIPs(redirect.Netns(h), ips...)
}

// prefixes parses each of s, which must be a valid prefix.
func prefixes(s ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(s))
	for i, p := range s {
		out[i] = netip.MustParsePrefix(p)
	}
	return out
}
