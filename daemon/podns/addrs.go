package podns

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Addrs lists the addresses the pod's netns at path holds, with their
// prefix lengths, in the kernel's order (IPv4 before IPv6), leaving out
// loopback and link-local ones. It is how the agent learns a pod's
// addresses when the runtime gave none (a CNI call with no prevResult, as
// under Multus or an own conflist): istio-iptables reads them the same way,
// inside the netns, to choose the pod's IP families. The netns is queried
// through a netlink socket opened inside it; no thread changes namespace.
func (o *Opener) Addrs(ctx context.Context, path string) ([]netip.Prefix, error) {
	ns, err := o.OpenContext(ctx, path)
	if err != nil {
		return nil, err
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("netlink in netns %q: %w", path, err)
	}
	defer h.Close()
	list, err := h.AddrList(nil, netlink.FAMILY_ALL)
	if err != nil {
		return nil, fmt.Errorf("list addresses in netns %q: %w", path, err)
	}
	var out []netip.Prefix
	for _, a := range list {
		ip, ok := netip.AddrFromSlice(a.IP)
		if !ok || a.IPNet == nil {
			continue
		}
		ip = ip.Unmap()
		if ip.IsLoopback() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() {
			continue
		}
		bits, _ := a.Mask.Size()
		out = append(out, netip.PrefixFrom(ip, bits))
	}
	return out, nil
}
