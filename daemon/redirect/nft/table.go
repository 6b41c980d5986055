// Package nft is sluice's small model of an nftables table: sets, chains,
// rules built from a fixed vocabulary of matches, statements and verdicts,
// and their rendering as `nft` text. It is pure (no netlink, no syscalls:
// redirect's deps_test.go): package redirect decides what goes into a
// table, this one what a table is, and redirect/kernel/internal/nftnl how it
// reaches the kernel.
package nft

import "net/netip"

// Table is one table in the inet family, so a single table covers IPv4
// and IPv6: named sets, then chains of rules. It is the single description
// both the text (Render) and the netlink messages (package nftnl) are
// produced from, so the two cannot disagree. Treat a Table as immutable
// once handed to nftnl or Render.
type Table struct {
	Name   string
	Sets   []Set
	Chains []Chain
}

// SetType is what a set holds.
type SetType uint8

const (
	SetPorts     SetType = iota // inet_service
	SetIPv4                     // ipv4_addr, flags interval
	SetIPv6                     // ipv6_addr, flags interval
	SetIfnames                  // ifname
	SetIPv4Addrs                // ipv4_addr, single addresses, elements managed outside the table's description
	SetIPv6Addrs                // ipv6_addr, likewise
)

// Set is a named set. Rules only name it, so what varies per pod lives in
// set elements and the rules stay the same shape for every pod.
type Set struct {
	Name     string
	Type     SetType
	Ports    []uint16       // SetPorts, sorted, unique
	Prefixes []netip.Prefix // SetIPv4/SetIPv6, masked, sorted, none inside another
	Ifnames  []string       // SetIfnames, sorted, unique
}

// Addrs are elements for one named set of single addresses (SetIPv4Addrs
// or SetIPv6Addrs), which come and go apart from the table's description.
type Addrs struct {
	Set   string
	Addrs []netip.Addr
}

// Hook is where a base chain hooks into the netfilter path.
type Hook uint8

const (
	HookPrerouting Hook = iota + 1
	HookOutput
	HookPostrouting
)

// ChainType is the nft chain type of a base chain.
type ChainType uint8

const (
	TypeNAT    ChainType = iota // iptables' nat table
	TypeFilter                  // with mangle priority on prerouting: iptables' mangle PREROUTING
	TypeRoute                   // output only: re-routes a packet whose mark changed, as mangle OUTPUT does
)

// The priorities iptables' tables run at, which nft names.
const (
	rawPriority    = -300 // NF_IP_PRI_RAW, ahead of conntrack
	manglePriority = -150 // NF_IP_PRI_MANGLE
	natDstPriority = -100 // NF_IP_PRI_NAT_DST, "dstnat"
	natSrcPriority = 100  // NF_IP_PRI_NAT_SRC, "srcnat"
)

// Chain is a base chain when Hook is set (policy accept), else a regular
// chain reached by jump.
type Chain struct {
	Name     string
	Hook     Hook
	Type     ChainType
	Priority int
	Rules    []Rule
}

// NATChain is a base chain where iptables' nat table would hook.
func NATChain(name string, h Hook) Chain {
	prio := natDstPriority
	if h == HookPostrouting {
		prio = natSrcPriority
	}
	return Chain{Name: name, Hook: h, Type: TypeNAT, Priority: prio}
}

// MangleChain is a base chain where iptables' mangle table would hook. On
// output it is a route chain: only those re-route a packet after its mark
// changed, which is what policy routes rely on.
func MangleChain(name string, h Hook) Chain {
	typ := TypeFilter
	if h == HookOutput {
		typ = TypeRoute
	}
	return Chain{Name: name, Hook: h, Type: typ, Priority: manglePriority}
}

// RawChain is a base chain where iptables' raw table would hook: ahead of
// conntrack, where a packet's conntrack zone can still be chosen.
func RawChain(name string, h Hook) Chain {
	return Chain{Name: name, Hook: h, Type: TypeFilter, Priority: rawPriority}
}
