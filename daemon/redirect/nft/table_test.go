package nft

import (
	"net/netip"
	"strings"
	"testing"
)

// testTables are two tables of one name: wide uses every kind of set and a
// good part of the vocabulary, plain is small. Tests apply one over the
// other; package redirect's goldens cover the rest.
func testTables() (wide, plain *Table) {
	const name = "sluice-nft-test"
	out := NATChain("output", HookOutput)
	out.Rules = []Rule{
		{Tag: "skip-ifs", Matches: []Match{IfSetMatch{Out: true, Set: "ifs"}}, Verdict: Return()},
		{Tag: "skip-ports", Matches: []Match{PortSetMatch{Proto: TCP, Set: "ports"}}, Verdict: Return()},
		{Tag: "skip-v4", Matches: []Match{DaddrSetMatch{Family: IPv4, Set: "v4"}}, Verdict: Return()},
		{Tag: "skip-v6", Matches: []Match{DaddrSetMatch{Family: IPv6, Set: "v6"}}, Verdict: Return()},
		{Tag: "owner", Matches: []Match{OwnerMatch{GID: true, Neg: true, ID: 1337}, IfMatch{Out: true, Name: "lo"}}, Verdict: Return()},
		{Tag: "mark", Matches: []Match{MarkMatch{Mask: 0xfff, Value: 0x539}, AddrMatch{Neg: true, Addr: netip.MustParseAddr("127.0.0.1")}}, Verdict: Accept()},
		{Tag: "dns", Matches: []Match{NFProtoMatch{Family: IPv4}, PortMatch{Proto: UDP, Port: 53}}, Verdict: RedirectTo(15053)},
		{Tag: "tcp", Matches: []Match{L4ProtoMatch{Proto: TCP}}, Verdict: Jump("redirect")},
	}
	pre := MangleChain("prerouting", HookPrerouting)
	pre.Rules = []Rule{
		{Tag: "restore", Matches: []Match{MarkMatch{CT: true, Mask: 0xfff, Value: 0x111}}, Stmts: []Stmt{MarkSet{From: FromCtMark}}},
		{Tag: "established", Matches: []Match{L4ProtoMatch{Proto: TCP}, EstablishedMatch{}}, Verdict: Accept()},
		{Tag: "tproxy", Matches: []Match{L4ProtoMatch{Proto: TCP}},
			Stmts: []Stmt{TProxyStmt{Family: IPv4, Port: 15006}, MarkSet{Mask: 0xfff, Value: 0x111}}, Verdict: Accept()},
	}
	post := NATChain("postrouting", HookPostrouting)
	post.Rules = []Rule{{Tag: "snat", Matches: []Match{LocalSourceMatch{}, DaddrSetMatch{Family: IPv4, Set: "pods-v4"}, L4ProtoMatch{Proto: TCP}},
		Stmts: []Stmt{SNATStmt{Addr: netip.MustParseAddr("169.254.7.127")}}}}
	redirect := Chain{Name: "redirect", Rules: []Rule{{Tag: "redirect", Matches: []Match{L4ProtoMatch{Proto: TCP}}, Verdict: RedirectTo(15001)}}}
	wide = &Table{
		Name: name,
		Sets: []Set{
			{Name: "ports", Type: SetPorts, Ports: []uint16{22, 5432}},
			{Name: "v4", Type: SetIPv4, Prefixes: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("169.254.169.254/32")}},
			{Name: "v6", Type: SetIPv6, Prefixes: []netip.Prefix{netip.MustParsePrefix("fd00::/8")}},
			{Name: "ifs", Type: SetIfnames, Ifnames: []string{"net1"}},
			{Name: "pods-v4", Type: SetIPv4Addrs},
		},
		Chains: []Chain{pre, out, post, redirect},
	}
	plain = &Table{Name: name, Chains: []Chain{{Name: "redirect", Rules: []Rule{{Tag: "redirect", Matches: []Match{L4ProtoMatch{Proto: TCP}}, Verdict: RedirectTo(15001)}}}}}
	return wide, plain
}

func TestRender(t *testing.T) {
	wide, plain := testTables()
	if got, want := plain.Render(), "table inet sluice-nft-test {\n\tchain redirect {\n\t\tmeta l4proto tcp redirect to :15001 comment \"redirect\"\n\t}\n}\n"; got != want {
		t.Errorf("plain renders\n%s\nwant\n%s", got, want)
	}
	for _, block := range []string{"\tset pods-v4 {\n\t\ttype ipv4_addr\n\t}\n", "\t\ttype nat hook postrouting priority srcnat; policy accept;\n"} {
		if !strings.Contains(wide.Render(), block) {
			t.Errorf("wide render lacks %q:\n%s", block, wide.Render())
		}
	}
}
