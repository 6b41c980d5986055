package kernel

import (
	"fmt"
	"net/netip"

	"github.com/vishvananda/netns"

	"github.com/sluicemesh/sluice/daemon/redirect"
	"github.com/sluicemesh/sluice/daemon/redirect/kernel/internal/nftnl"
)

// EnsureHostTable creates or repairs table inet sluice-host in ns (the
// node's netns) for cfg, in one transaction, keeping the pod addresses the
// sets already hold: sets are added only if missing, and the chain is
// added if missing, flushed and written again, as kube-proxy re-asserts its
// chains. Calling it on every agent start is cheap and safe. The host
// table belongs to the agent's own start and stop, not to a pod, so it is
// not part of redirect.Kernel.
func (Netlink) EnsureHostTable(ns redirect.Netns, cfg redirect.HostConfig) error {
	r, err := redirect.BuildHost(cfg)
	if err != nil {
		return err
	}
	return nftnl.Ensure(netns.NsHandle(ns), r.Table())
}

// RemoveHostTable deletes table inet sluice-host from ns; a missing table
// is not an error.
func (Netlink) RemoveHostTable(ns redirect.Netns) error {
	return nftnl.Remove(netns.NsHandle(ns), redirect.HostTableName)
}

// changeHostIPs adds pod addresses to the host table's sets, or removes
// them; one already there (or not there) is not an error. The table must
// exist (EnsureHostTable).
func changeHostIPs(ns netns.NsHandle, remove bool, ips []netip.Addr) error {
	verb := "add"
	if remove {
		verb = "remove"
	}
	sets, ok := redirect.HostSetAddrs(ips)
	if !ok {
		return fmt.Errorf("%s pod address in table inet %s: invalid address", verb, redirect.HostTableName)
	}
	if len(sets) == 0 {
		return nil
	}
	if remove {
		return nftnl.RemoveAddrs(ns, redirect.HostTableName, sets...)
	}
	return nftnl.AddAddrs(ns, redirect.HostTableName, sets...)
}
