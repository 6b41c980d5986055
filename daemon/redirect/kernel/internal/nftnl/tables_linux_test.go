package nftnl

import (
	"fmt"
	"net/netip"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/sluicemesh/sluice/daemon/redirect/nft"
	"github.com/sluicemesh/sluice/internal/nlsock"
)

// testTables are two tables of one name: wide uses every kind of set and a
// good part of the vocabulary, plain is small. Tests apply one over the
// other; package redirect's goldens cover the rest.
func testTables() (wide, plain *nft.Table) {
	const name = "sluice-nft-test"
	out := nft.NATChain("output", nft.HookOutput)
	out.Rules = []nft.Rule{
		{Tag: "skip-ifs", Matches: []nft.Match{nft.IfSetMatch{Out: true, Set: "ifs"}}, Verdict: nft.Return()},
		{Tag: "skip-ports", Matches: []nft.Match{nft.PortSetMatch{Proto: nft.TCP, Set: "ports"}}, Verdict: nft.Return()},
		{Tag: "skip-v4", Matches: []nft.Match{nft.DaddrSetMatch{Family: nft.IPv4, Set: "v4"}}, Verdict: nft.Return()},
		{Tag: "skip-v6", Matches: []nft.Match{nft.DaddrSetMatch{Family: nft.IPv6, Set: "v6"}}, Verdict: nft.Return()},
		{Tag: "owner", Matches: []nft.Match{nft.OwnerMatch{GID: true, Neg: true, ID: 1337}, nft.IfMatch{Out: true, Name: "lo"}}, Verdict: nft.Return()},
		{Tag: "mark", Matches: []nft.Match{nft.MarkMatch{Mask: 0xfff, Value: 0x539}, nft.AddrMatch{Neg: true, Addr: netip.MustParseAddr("127.0.0.1")}}, Verdict: nft.Accept()},
		{Tag: "dns", Matches: []nft.Match{nft.NFProtoMatch{Family: nft.IPv4}, nft.PortMatch{Proto: nft.UDP, Port: 53}}, Verdict: nft.RedirectTo(15053)},
		{Tag: "tcp", Matches: []nft.Match{nft.L4ProtoMatch{Proto: nft.TCP}}, Verdict: nft.Jump("redirect")},
	}
	pre := nft.MangleChain("prerouting", nft.HookPrerouting)
	pre.Rules = []nft.Rule{
		{Tag: "restore", Matches: []nft.Match{nft.MarkMatch{CT: true, Mask: 0xfff, Value: 0x111}}, Stmts: []nft.Stmt{nft.MarkSet{From: nft.FromCtMark}}},
		{Tag: "established", Matches: []nft.Match{nft.L4ProtoMatch{Proto: nft.TCP}, nft.EstablishedMatch{}}, Verdict: nft.Accept()},
		{Tag: "tproxy", Matches: []nft.Match{nft.L4ProtoMatch{Proto: nft.TCP}},
			Stmts: []nft.Stmt{nft.TProxyStmt{Family: nft.IPv4, Port: 15006}, nft.MarkSet{Mask: 0xfff, Value: 0x111}}, Verdict: nft.Accept()},
	}
	post := nft.NATChain("postrouting", nft.HookPostrouting)
	post.Rules = []nft.Rule{{Tag: "snat", Matches: []nft.Match{nft.LocalSourceMatch{}, nft.DaddrSetMatch{Family: nft.IPv4, Set: "pods-v4"}, nft.L4ProtoMatch{Proto: nft.TCP}},
		Stmts: []nft.Stmt{nft.SNATStmt{Addr: netip.MustParseAddr("169.254.7.127")}}}}
	redirect := nft.Chain{Name: "redirect", Rules: []nft.Rule{{Tag: "redirect", Matches: []nft.Match{nft.L4ProtoMatch{Proto: nft.TCP}}, Verdict: nft.RedirectTo(15001)}}}
	wide = &nft.Table{
		Name: name,
		Sets: []nft.Set{
			{Name: "ports", Type: nft.SetPorts, Ports: []uint16{22, 5432}},
			{Name: "v4", Type: nft.SetIPv4, Prefixes: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("169.254.169.254/32")}},
			{Name: "v6", Type: nft.SetIPv6, Prefixes: []netip.Prefix{netip.MustParsePrefix("fd00::/8")}},
			{Name: "ifs", Type: nft.SetIfnames, Ifnames: []string{"net1"}},
			{Name: "pods-v4", Type: nft.SetIPv4Addrs},
		},
		Chains: []nft.Chain{pre, out, post, redirect},
	}
	plain = &nft.Table{Name: name, Chains: []nft.Chain{{Name: "redirect", Rules: []nft.Rule{{Tag: "redirect", Matches: []nft.Match{nft.L4ProtoMatch{Proto: nft.TCP}}, Verdict: nft.RedirectTo(15001)}}}}}
	return wide, plain
}

// apply is ApplyOn on a socket of its own, as the tests need it.
func apply(ns netns.NsHandle, t *nft.Table) (existed bool, gen uint32, err error) {
	socks, err := nlsock.Open(ns, unix.NETLINK_NETFILTER)
	if err != nil {
		return false, 0, fmt.Errorf("apply table inet %s: %w", t.Name, err)
	}
	return ApplyOn(ns, socks[0], t, t.Render())
}

// verifySince is VerifySinceOn on a socket of its own.
func verifySince(ns netns.NsHandle, t *nft.Table, since uint32) ([]string, uint32, error) {
	socks, err := nlsock.Open(ns, unix.NETLINK_NETFILTER)
	if err != nil {
		return nil, 0, fmt.Errorf("verify table inet %s: %w", t.Name, err)
	}
	return VerifySinceOn(ns, socks[0], t, since)
}

// verify is verifySince that always reads the table back.
func verify(ns netns.NsHandle, t *nft.Table) ([]string, error) {
	drift, _, err := verifySince(ns, t, 0)
	return drift, err
}
