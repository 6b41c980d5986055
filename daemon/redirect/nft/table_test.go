package nft

import (
	"net/netip"
	"strings"
	"testing"
)

func TestRender(t *testing.T) {
	redirect := Chain{Name: "redirect", Rules: []Rule{{Tag: "redirect", Matches: []Match{L4ProtoMatch{Proto: TCP}}, Verdict: RedirectTo(15001)}}}
	plain := &Table{Name: "sluice-nft-test", Chains: []Chain{redirect}}
	if got, want := plain.Render(), "table inet sluice-nft-test {\n\tchain redirect {\n\t\tmeta l4proto tcp redirect to :15001 comment \"redirect\"\n\t}\n}\n"; got != want {
		t.Errorf("plain renders\n%s\nwant\n%s", got, want)
	}
	post := NATChain("postrouting", HookPostrouting)
	post.Rules = []Rule{{Tag: "snat", Matches: []Match{LocalSourceMatch{}, DaddrSetMatch{Family: IPv4, Set: "pods-v4"}, L4ProtoMatch{Proto: TCP}},
		Stmts: []Stmt{SNATStmt{Addr: netip.MustParseAddr("169.254.7.127")}}}}
	wide := &Table{Name: "sluice-nft-test", Sets: []Set{{Name: "pods-v4", Type: SetIPv4Addrs}}, Chains: []Chain{post, redirect}}
	for _, block := range []string{"\tset pods-v4 {\n\t\ttype ipv4_addr\n\t}\n", "\t\ttype nat hook postrouting priority srcnat; policy accept;\n"} {
		if !strings.Contains(wide.Render(), block) {
			t.Errorf("wide render lacks %q:\n%s", block, wide.Render())
		}
	}
}
