package redirect

import (
	"crypto/sha256"
	"encoding/hex"
	"net/netip"
)

// TableName is the one nftables table sluice owns in a pod's netns, in the
// inet family so a single ruleset covers IPv4 and IPv6.
const TableName = "sluice"

// Ruleset is the whole table inet sluice for one pod: named sets, then
// chains of rules. It is the single description both the nft text (Render)
// and the netlink messages (Apply, Verify) are produced from, so the two
// cannot disagree. A Ruleset is immutable once built and safe to share
// between goroutines.
type Ruleset struct {
	sets   []set
	chains []chain
	text   string // the rendering, computed once by Build
}

// Render is the ruleset as `nft list table inet sluice` prints it.
func (r *Ruleset) Render() string { return r.text }

// Hash identifies the ruleset: the sha256 (hex) of its rendering.
func (r *Ruleset) Hash() string {
	sum := sha256.Sum256([]byte(r.text))
	return hex.EncodeToString(sum[:])
}

type setType uint8

const (
	setPorts   setType = iota // inet_service
	setIPv4                   // ipv4_addr, flags interval
	setIPv6                   // ipv6_addr, flags interval
	setIfnames                // ifname
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
)

// natDstPriority is NF_IP_PRI_NAT_DST (-100), "dstnat" in nft, the
// priority iptables' nat PREROUTING and OUTPUT run at.
const natDstPriority = -100

// chain is a base chain when hook is set (type nat, policy accept), else a
// regular chain reached by jump.
type chain struct {
	name  string
	hook  hookKind
	rules []rule
}

// rule is matches ANDed together, then one verdict. tag names the rule
// uniquely within the table and travels with it to the kernel as the rule's
// comment, which is how Verify recognises its own rules among others'.
type rule struct {
	tag     string
	matches []match
	verdict verdict
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

type verdictKind uint8

const (
	verdictReturn verdictKind = iota + 1
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
func jump(chain string) verdict      { return verdict{kind: verdictJump, chain: chain} }
func redirectTo(port uint16) verdict { return verdict{kind: verdictRedirect, port: port} }
