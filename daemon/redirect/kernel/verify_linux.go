package kernel

import (
	"fmt"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/sluicemesh/sluice/daemon/redirect"
	"github.com/sluicemesh/sluice/daemon/redirect/kernel/internal/nftnl"
	"github.com/sluicemesh/sluice/internal/nlsock"
)

// verifySince reads table inet sluice in ns, the policy routes and lo's
// addresses, and compares them with r (less what apply leaves out when lo
// has no IPv6). It returns one human-readable item per difference, none
// when the kernel holds exactly r; the error is for failing to read at
// all. Rules are recognised by their tag and compared expression by
// expression (nftnl.VerifySinceOn), so a rule someone replaced, one that
// went missing and one someone added are each named. Like apply it never
// moves the caller's thread into ns.
//
// since, when not 0, is the generation at which the table was known to be
// exactly r (apply's, or a verifySince's that found no drift): while the
// netns's generation is still since and the table is there, nothing in
// nftables changed and the table is not read back. Routes and lo's
// addresses are rtnetlink state, which the generation does not cover:
// they are always read. It returns the generation to pass next time.
func verifySince(ns netns.NsHandle, r *redirect.Ruleset, since redirect.Gen) ([]string, redirect.Gen, error) {
	// Both sockets in one visit to ns.
	socks, err := nlsock.Open(ns, unix.NETLINK_NETFILTER, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, 0, fmt.Errorf("verify in netns fd %d: %w", int(ns), err)
	}
	rt := socks[1].Conn()
	defer rt.Close()
	drift, gen, err := nftnl.VerifySinceOn(ns, socks[0], r.Table(), uint32(since))
	if err != nil {
		return nil, 0, err
	}
	have, err := listLoAddrs(rt, loopbackIndex)
	if err != nil {
		return nil, 0, fmt.Errorf("verify addresses on %s in netns fd %d: %w", redirect.LoopbackInterface, int(ns), err)
	}
	routes, addrs, err := programmableWith(ns, r, have)
	if err != nil {
		return append(drift, err.Error()), redirect.Gen(gen), nil
	}
	// A ruleset without routes still reports stale ones of ours: Apply
	// would prune them.
	rd, err := routeDrift(ns, rt, routes)
	if err != nil {
		return nil, 0, fmt.Errorf("verify policy routes in netns fd %d: %w", int(ns), err)
	}
	return append(append(drift, rd...), loAddrDrift(have, addrs)...), redirect.Gen(gen), nil
}
