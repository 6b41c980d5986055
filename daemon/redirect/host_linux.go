package redirect

import (
	"fmt"
	"net/netip"

	"github.com/vishvananda/netns"

	"github.com/sluicemesh/sluice/daemon/redirect/nft"
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
	return nft.Ensure(ns, r.table)
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
	return nft.Remove(ns, HostTableName)
}

func changeHostIPs(ns netns.NsHandle, remove bool, ips []netip.Addr) error {
	verb := "add"
	if remove {
		verb = "remove"
	}
	byset := map[string][]netip.Addr{}
	for _, ip := range ips {
		ip = ip.Unmap()
		if !ip.IsValid() {
			return fmt.Errorf("%s pod address in table inet %s: invalid address", verb, HostTableName)
		}
		byset[hostSet(ip)] = append(byset[hostSet(ip)], ip)
	}
	if len(byset) == 0 {
		return nil
	}
	sets := []nft.Addrs{{Set: setHostPodsV4, Addrs: byset[setHostPodsV4]}, {Set: setHostPodsV6, Addrs: byset[setHostPodsV6]}}
	if remove {
		return nft.RemoveAddrs(ns, HostTableName, sets...)
	}
	return nft.AddAddrs(ns, HostTableName, sets...)
}
