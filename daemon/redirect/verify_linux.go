package redirect

import (
	"fmt"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/sluicemesh/sluice/daemon/redirect/nft"
	"github.com/sluicemesh/sluice/internal/nlsock"
)

// Verify reads table inet sluice in ns, the policy routes and lo's
// addresses, and compares them with r (less what Apply leaves out when lo
// has no IPv6). It returns one human-readable item per difference, none
// when the kernel holds exactly r; the error is for failing to read at all.
//
// Rules are recognised by their tag and compared expression by expression
// (nft.Verify), so a rule someone replaced, one that went missing and one
// someone added are each named. Like Apply it never moves the caller's
// thread into ns.
func Verify(ns netns.NsHandle, r *Ruleset) ([]string, error) {
	drift, _, err := VerifySince(ns, r, 0)
	return drift, err
}

// VerifySince is Verify that trusts since, the generation at which the
// table was known to be exactly r (ApplyGen's, or a VerifySince's that
// found no drift): while the netns's generation is still since and the
// table is there, nothing in nftables changed and the table is not read
// back (nft.VerifySince). Routes and lo's addresses are rtnetlink state,
// which the generation does not cover: they are always read. It returns
// the generation to pass next time.
func VerifySince(ns netns.NsHandle, r *Ruleset, since Gen) ([]string, Gen, error) {
	// Both sockets in one visit to ns.
	socks, err := nlsock.Open(ns, unix.NETLINK_NETFILTER, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, 0, fmt.Errorf("verify in netns fd %d: %w", int(ns), err)
	}
	rt := socks[1].Conn()
	defer rt.Close()
	drift, gen, err := nft.VerifySinceOn(ns, socks[0], r.table, uint32(since))
	if err != nil {
		return nil, 0, err
	}
	have, err := listLoAddrs(rt, loopbackIndex)
	if err != nil {
		return nil, 0, fmt.Errorf("verify addresses on %s in netns fd %d: %w", loopbackInterface, int(ns), err)
	}
	routes, addrs, err := r.programmableWith(ns, have)
	if err != nil {
		return append(drift, err.Error()), Gen(gen), nil
	}
	// A ruleset without routes still reports stale ones of ours: Apply
	// would prune them.
	rd, err := routeDrift(ns, rt, routes)
	if err != nil {
		return nil, 0, fmt.Errorf("verify policy routes in netns fd %d: %w", int(ns), err)
	}
	return append(append(drift, rd...), loAddrDrift(have, addrs)...), Gen(gen), nil
}
