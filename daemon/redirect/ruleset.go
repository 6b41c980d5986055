package redirect

import (
	"crypto/sha256"
	"encoding/hex"
	"net/netip"
)

// TableName is the one nftables table sluice owns in a pod's netns, in the
// inet family so a single ruleset covers IPv4 and IPv6.
const TableName = "sluice"

// HostTableName is the table sluice owns in the node's netns (host.go).
const HostTableName = "sluice-host"

// Ruleset is the whole table inet sluice for one pod: named sets, then
// chains of rules, and the policy routes some modes need beside them. It is
// the single description both the text (Render) and the netlink messages
// (Apply, Verify) are produced from, so the two cannot disagree. A Ruleset
// is immutable once built and safe to share between goroutines.
type Ruleset struct {
	table  string
	sets   []set
	chains []chain
	routes []policyRoute
	text   string // the rendering, computed once by Build
}

// Render is the ruleset as `nft list table inet sluice` prints it. When the
// mode needs policy routing (TPROXY, ambient), the ip rules and routes
// follow the table as `#` comment lines in `ip` syntax, so the text stays
// valid `nft -f` input and still shows everything Apply programs.
func (r *Ruleset) Render() string { return r.text }

// Hash identifies the ruleset: the sha256 (hex) of its rendering.
func (r *Ruleset) Hash() string {
	sum := sha256.Sum256([]byte(r.text))
	return hex.EncodeToString(sum[:])
}

type setType uint8

const (
	setPorts     setType = iota // inet_service
	setIPv4                     // ipv4_addr, flags interval
	setIPv6                     // ipv6_addr, flags interval
	setIfnames                  // ifname
	setIPv4Addrs                // ipv4_addr, single addresses, elements managed outside Build
	setIPv6Addrs                // ipv6_addr, likewise
)

// set is a named set. Rules only name it, so what varies per pod lives in
// set elements and the rules stay the same shape for every pod.
type set struct {
	name     string
	typ      setType
	ports    []uint16       // setPorts, sorted, unique
	prefixes []netip.Prefix // setIPv4/setIPv6, masked, sorted, none inside another
	ifnames  []string       // setIfnames, sorted, unique
}

type hookKind uint8

const (
	hookPrerouting hookKind = iota + 1
	hookOutput
	hookPostrouting
)

// chainType is the nft chain type of a base chain.
type chainType uint8

const (
	typeNAT    chainType = iota // iptables' nat table
	typeFilter                  // with mangle priority on prerouting: iptables' mangle PREROUTING
	typeRoute                   // output only: re-routes a packet whose mark changed, as mangle OUTPUT does
)

// The priorities iptables' tables run at, which nft names.
const (
	manglePriority = -150 // NF_IP_PRI_MANGLE
	natDstPriority = -100 // NF_IP_PRI_NAT_DST, "dstnat"
	natSrcPriority = 100  // NF_IP_PRI_NAT_SRC, "srcnat"
)

// chain is a base chain when hook is set (policy accept), else a regular
// chain reached by jump.
type chain struct {
	name  string
	hook  hookKind
	typ   chainType
	prio  int
	rules []rule
}

// natChain is a base chain where iptables' nat table would hook.
func natChain(name string, h hookKind) chain {
	prio := natDstPriority
	if h == hookPostrouting {
		prio = natSrcPriority
	}
	return chain{name: name, hook: h, typ: typeNAT, prio: prio}
}

// mangleChain is a base chain where iptables' mangle table would hook. On
// output it is a route chain: only those re-route a packet after its mark
// changed, which is what the policy routes rely on.
func mangleChain(name string, h hookKind) chain {
	typ := typeFilter
	if h == hookOutput {
		typ = typeRoute
	}
	return chain{name: name, hook: h, typ: typ, prio: manglePriority}
}

// rule is matches ANDed together, then statements, then at most one
// verdict (none: evaluation goes on with the next rule). tag names the rule
// uniquely within the table and travels with it to the kernel as the rule's
// comment, which is how Verify recognises its own rules among others'.
type rule struct {
	tag     string
	matches []match
	stmts   []stmt
	verdict verdict
}

// policyRoute is `ip rule add fwmark mark/mask lookup table pref priority`
// and `ip route add local default dev lo table table` for one family: a
// packet carrying the mark is delivered locally whatever its destination,
// which is how TPROXY-ed packets and replies to transparent sockets reach
// the proxy.
type policyRoute struct {
	fam      family
	mark     uint32
	mask     uint32
	table    uint32
	priority uint32
}

type family uint8

const (
	ipv4 family = iota + 1
	ipv6
)

type l4proto uint8

const (
	tcp l4proto = 6
	udp l4proto = 17
)

// match is one condition of a rule. The concrete types below are the whole
// vocabulary; render.go turns each into nft text and exprs_linux.go into
// netlink expressions.
type match interface{ isMatch() }

type (
	// nfprotoMatch restricts a rule to one address family.
	nfprotoMatch struct{ fam family }
	// l4protoMatch is `meta l4proto`.
	l4protoMatch struct{ proto l4proto }
	// portMatch is a destination port, equal or (neg) not equal.
	portMatch struct {
		proto l4proto
		neg   bool
		port  uint16
	}
	// portSetMatch is a destination port in a named set.
	portSetMatch struct {
		proto l4proto
		set   string
	}
	// ifMatch is the input (or, with out, output) interface name.
	ifMatch struct {
		out  bool
		neg  bool
		name string
	}
	// ifSetMatch is the input or output interface name in a named set.
	ifSetMatch struct {
		out bool
		set string
	}
	// addrMatch is a source or destination address, equal or not equal;
	// its family follows from the address.
	addrMatch struct {
		src  bool
		neg  bool
		addr netip.Addr
	}
	// daddrSetMatch is a destination address in a named interval set.
	daddrSetMatch struct {
		fam family
		set string
	}
	// ownerMatch is the sending socket's uid (or, with gid, gid).
	ownerMatch struct {
		gid bool
		neg bool
		id  uint32
	}
	// markMatch is the packet mark (or, with ct, the conntrack mark) under
	// mask, equal or not equal to value.
	markMatch struct {
		ct          bool
		neg         bool
		mask, value uint32
	}
	// establishedMatch is `ct state established,related`.
	establishedMatch struct{}
	// localSourceMatch is `fib saddr type local`: the source address is one
	// of this netns's own, so the packet was sent from here, not forwarded.
	localSourceMatch struct{}
)

func (nfprotoMatch) isMatch()  {}
func (l4protoMatch) isMatch()  {}
func (portMatch) isMatch()     {}
func (portSetMatch) isMatch()  {}
func (ifMatch) isMatch()       {}
func (ifSetMatch) isMatch()    {}
func (addrMatch) isMatch()     {}
func (daddrSetMatch) isMatch() {}
func (ownerMatch) isMatch()    {}
func (markMatch) isMatch()     {}

func (establishedMatch) isMatch() {}
func (localSourceMatch) isMatch() {}

// fullMask is a mark mask that keeps every bit; nft then shows no mask.
const fullMask = 0xffffffff

// stmt is a statement between a rule's matches and its verdict.
type stmt interface{ isStmt() }

type markSource uint8

const (
	fromValue    markSource = iota // the value, under the mask
	fromCtMark                     // the conntrack mark (restore-mark)
	fromMetaMark                   // the packet mark (save-mark)
)

type (
	// markSet sets the packet mark (or, with ct, the conntrack mark).
	// From a value, only the bits in mask change, as iptables'
	// --set-xmark value/mask does.
	markSet struct {
		ct          bool
		from        markSource
		mask, value uint32
	}
	// tproxyStmt hands the packet to the local socket on port, keeping
	// its destination; fam 0 means either family.
	tproxyStmt struct {
		fam  family
		port uint16
	}
	// snatStmt rewrites the source address; its family follows from addr.
	snatStmt struct{ addr netip.Addr }
)

func (markSet) isStmt()    {}
func (tproxyStmt) isStmt() {}
func (snatStmt) isStmt()   {}

type verdictKind uint8

const (
	verdictNone verdictKind = iota // go on with the next rule
	verdictReturn
	verdictAccept
	verdictJump
	// verdictRedirect DNATs to the local port; the rule must have pinned the
	// transport protocol first, as nft itself insists.
	verdictRedirect
)

type verdict struct {
	kind  verdictKind
	chain string // verdictJump
	port  uint16 // verdictRedirect
}

func ret() verdict                   { return verdict{kind: verdictReturn} }
func accept() verdict                { return verdict{kind: verdictAccept} }
func jump(chain string) verdict      { return verdict{kind: verdictJump, chain: chain} }
func redirectTo(port uint16) verdict { return verdict{kind: verdictRedirect, port: port} }
