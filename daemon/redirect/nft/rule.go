package nft

import "net/netip"

// Rule is matches ANDed together, then statements, then at most one
// verdict (none: evaluation goes on with the next rule). Tag names the rule
// uniquely within the table and travels with it to the kernel as the rule's
// comment, which is how Verify recognises its own rules among others'.
type Rule struct {
	Tag     string
	Matches []Match
	Stmts   []Stmt
	Verdict Verdict
}

// Family is an address family.
type Family uint8

const (
	IPv4 Family = iota + 1
	IPv6
)

// AddrFamily is a's family.
func AddrFamily(a netip.Addr) Family {
	if a.Is4() {
		return IPv4
	}
	return IPv6
}

// Proto is a transport protocol.
type Proto uint8

const (
	TCP Proto = 6
	UDP Proto = 17
)

// Match is one condition of a rule. The concrete types below are the whole
// vocabulary; render.go turns each into nft text, and package nftnl
// (redirect/kernel/internal/nftnl, exprs_linux.go) into netlink expressions.
type Match interface{ isMatch() }

type (
	// NFProtoMatch restricts a rule to one address family.
	NFProtoMatch struct{ Family Family }
	// L4ProtoMatch is `meta l4proto`.
	L4ProtoMatch struct{ Proto Proto }
	// PortMatch is a destination port (or, with Src, the source port),
	// equal or (Neg) not equal.
	PortMatch struct {
		Proto Proto
		Src   bool
		Neg   bool
		Port  uint16
	}
	// PortSetMatch is a destination port in a named set.
	PortSetMatch struct {
		Proto Proto
		Set   string
	}
	// IfMatch is the input (or, with Out, output) interface name.
	IfMatch struct {
		Out  bool
		Neg  bool
		Name string
	}
	// IfSetMatch is the input or output interface name in a named set.
	IfSetMatch struct {
		Out bool
		Set string
	}
	// AddrMatch is a source or destination address, equal or not equal;
	// its family follows from the address.
	AddrMatch struct {
		Src  bool
		Neg  bool
		Addr netip.Addr
	}
	// DaddrSetMatch is a destination address in a named set.
	DaddrSetMatch struct {
		Family Family
		Set    string
	}
	// OwnerMatch is the sending socket's uid (or, with GID, gid).
	OwnerMatch struct {
		GID bool
		Neg bool
		ID  uint32
	}
	// MarkMatch is the packet mark (or, with CT, the conntrack mark) under
	// Mask, equal or not equal to Value.
	MarkMatch struct {
		CT          bool
		Neg         bool
		Mask, Value uint32
	}
	// EstablishedMatch is `ct state established,related`.
	EstablishedMatch struct{}
	// InvalidMatch is `ct state invalid`.
	InvalidMatch struct{}
	// LocalSourceMatch is `fib saddr type local`: the source address is one
	// of this netns's own, so the packet was sent from here, not forwarded.
	LocalSourceMatch struct{}
)

func (NFProtoMatch) isMatch()  {}
func (L4ProtoMatch) isMatch()  {}
func (PortMatch) isMatch()     {}
func (PortSetMatch) isMatch()  {}
func (IfMatch) isMatch()       {}
func (IfSetMatch) isMatch()    {}
func (AddrMatch) isMatch()     {}
func (DaddrSetMatch) isMatch() {}
func (OwnerMatch) isMatch()    {}
func (MarkMatch) isMatch()     {}

func (EstablishedMatch) isMatch() {}
func (InvalidMatch) isMatch()     {}
func (LocalSourceMatch) isMatch() {}

// FullMask is a mark mask that keeps every bit; nft then shows no mask.
const FullMask = 0xffffffff

// Stmt is a statement between a rule's matches and its verdict.
type Stmt interface{ isStmt() }

// MarkSource is where MarkSet takes the new mark from.
type MarkSource uint8

const (
	FromValue    MarkSource = iota // the value, under the mask
	FromCtMark                     // the conntrack mark (restore-mark)
	FromMetaMark                   // the packet mark (save-mark)
)

type (
	// MarkSet sets the packet mark (or, with CT, the conntrack mark).
	// From a value, only the bits in Mask change, as iptables'
	// --set-xmark value/mask does.
	MarkSet struct {
		CT          bool
		From        MarkSource
		Mask, Value uint32
	}
	// TProxyStmt hands the packet to the local socket on Port, keeping
	// its destination; Family 0 means either family.
	TProxyStmt struct {
		Family Family
		Port   uint16
	}
	// SNATStmt rewrites the source address; its family follows from Addr.
	SNATStmt struct{ Addr netip.Addr }
	// CTZoneSet puts the packet's connection in conntrack zone Zone
	// (iptables' CT --zone); it only works before conntrack has seen the
	// packet, so in a raw-priority chain.
	CTZoneSet struct{ Zone uint16 }
)

func (MarkSet) isStmt()    {}
func (TProxyStmt) isStmt() {}
func (SNATStmt) isStmt()   {}
func (CTZoneSet) isStmt()  {}

// VerdictKind is what a rule's verdict does.
type VerdictKind uint8

const (
	VerdictNone VerdictKind = iota // go on with the next rule
	VerdictReturn
	VerdictAccept
	VerdictJump
	// VerdictRedirect DNATs to the local port; the rule must have pinned
	// the transport protocol first, as nft itself insists.
	VerdictRedirect
	VerdictDrop
)

// Verdict ends a rule; the zero value is VerdictNone.
type Verdict struct {
	Kind  VerdictKind
	Chain string // VerdictJump
	Port  uint16 // VerdictRedirect
}

func Return() Verdict                { return Verdict{Kind: VerdictReturn} }
func Accept() Verdict                { return Verdict{Kind: VerdictAccept} }
func Jump(chain string) Verdict      { return Verdict{Kind: VerdictJump, Chain: chain} }
func RedirectTo(port uint16) Verdict { return Verdict{Kind: VerdictRedirect, Port: port} }
func Drop() Verdict                  { return Verdict{Kind: VerdictDrop} }
