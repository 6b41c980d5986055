package nftnl

import (
	"fmt"
	"net/netip"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/userdata"
	"golang.org/x/sys/unix"

	"github.com/sluicemesh/sluice/daemon/redirect/nft"
)

// This file translates the model into google/nftables values, expression
// for expression what nft 1.0 itself sends for the text render.go prints
// (checked against `nft --debug=netlink`), so the kernel's listing of an
// applied ruleset reads back as Render.

// reg is the one data register every rule uses: rules are simple enough
// that each match loads and compares before the next one loads.
const reg = 1

func nlTable(name string) *nftables.Table {
	return &nftables.Table{Name: name, Family: nftables.TableFamilyINet}
}

func nlSet(table *nftables.Table, s nft.Set, id uint32) (*nftables.Set, []nftables.SetElement) {
	ns := &nftables.Set{
		Table: table,
		Name:  s.Name,
		// A fixed, non-zero ID keeps AddSet from drawing one from
		// google/nftables' package-global counter, which is not safe to
		// touch from concurrent Applies. IDs only need to be unique
		// within one batch.
		ID:           id,
		KeyByteOrder: binaryutil.BigEndian,
	}
	var elems []nftables.SetElement
	switch s.Type {
	case nft.SetPorts:
		ns.KeyType = nftables.TypeInetService
		for _, p := range s.Ports {
			elems = append(elems, nftables.SetElement{Key: binaryutil.BigEndian.PutUint16(p)})
		}
	case nft.SetIPv4, nft.SetIPv6:
		ns.KeyType = nftables.TypeIPAddr
		if s.Type == nft.SetIPv6 {
			ns.KeyType = nftables.TypeIP6Addr
		}
		ns.Interval = true
		elems = intervalElements(s.Prefixes)
	case nft.SetIPv4Addrs:
		ns.KeyType = nftables.TypeIPAddr
	case nft.SetIPv6Addrs:
		ns.KeyType = nftables.TypeIP6Addr
	case nft.SetIfnames:
		ns.KeyType = nftables.TypeIFName
		// nft keeps strings in host byte order and, told otherwise by the
		// set's userdata, lists the names as empty strings.
		ns.KeyByteOrder = binaryutil.NativeEndian
		for _, n := range s.Ifnames {
			elems = append(elems, nftables.SetElement{Key: ifname(n)})
		}
	}
	return ns, elems
}

// intervalElements encodes sorted, non-overlapping prefixes the way nft
// does for an interval set: each range is a start element and an
// interval-end element one past its last address, a range that runs to the
// top of the address space has no end, and when the first range does not
// start at zero an interval-end at zero opens the set.
func intervalElements(prefixes []netip.Prefix) []nftables.SetElement {
	var elems []nftables.SetElement
	if len(prefixes) == 0 {
		return nil
	}
	if first := prefixes[0].Addr(); first != zeroOf(first) {
		elems = append(elems, nftables.SetElement{Key: zeroOf(first).AsSlice(), IntervalEnd: true})
	}
	for _, p := range prefixes {
		elems = append(elems, nftables.SetElement{Key: p.Addr().AsSlice()})
		if end, ok := pastEnd(p); ok {
			elems = append(elems, nftables.SetElement{Key: end.AsSlice(), IntervalEnd: true})
		}
	}
	return elems
}

func zeroOf(a netip.Addr) netip.Addr {
	if a.Is4() {
		return netip.IPv4Unspecified()
	}
	return netip.IPv6Unspecified()
}

// pastEnd is the first address after p, false when p reaches the top.
func pastEnd(p netip.Prefix) (netip.Addr, bool) {
	b := p.Addr().AsSlice()
	host := len(b)*8 - p.Bits()
	for i := len(b) - 1; i >= 0; i-- {
		bits := min(host, 8)
		host -= bits
		b[i] |= byte(1<<bits - 1) // last address of the prefix
	}
	last, _ := netip.AddrFromSlice(b)
	next := last.Next()
	return next, next.IsValid()
}

func ifname(n string) []byte {
	b := make([]byte, unix.IFNAMSIZ)
	copy(b, n)
	return b
}

func nlChain(table *nftables.Table, c nft.Chain) *nftables.Chain {
	nc := &nftables.Chain{Name: c.Name, Table: table}
	if c.Hook != 0 {
		accept := nftables.ChainPolicyAccept
		prio := nftables.ChainPriority(c.Priority)
		nc.Priority = &prio
		nc.Policy = &accept
		nc.Type = chainTypes[c.Type]
		nc.Hooknum = chainHooks[c.Hook]
	}
	return nc
}

// ruleTag is the rule's userdata: its tag as an nft comment, so `nft list`
// shows it and Verify can find the rule again.
func ruleTag(tag string) []byte {
	return userdata.AppendString(nil, userdata.TypeComment, tag)
}

func ruleExprs(r nft.Rule, setIDs map[string]uint32) []expr.Any {
	var out []expr.Any
	for _, m := range r.Matches {
		out = append(out, matchExprs(m, setIDs)...)
	}
	for _, st := range r.Stmts {
		out = append(out, stmtExprs(st)...)
	}
	return append(out, verdictExprs(r.Verdict)...)
}

func matchExprs(m nft.Match, setIDs map[string]uint32) []expr.Any {
	switch m := m.(type) {
	case nft.NFProtoMatch:
		return nfprotoExprs(m.Family)
	case nft.L4ProtoMatch:
		return l4protoExprs(m.Proto)
	case nft.PortMatch:
		return append(portLoad(m.Proto, m.Src), cmp(m.Neg, binaryutil.BigEndian.PutUint16(m.Port)))
	case nft.PortSetMatch:
		return append(dportLoad(m.Proto), lookup(m.Set, setIDs))
	case nft.IfMatch:
		return []expr.Any{ifLoad(m.Out), cmp(m.Neg, ifname(m.Name))}
	case nft.IfSetMatch:
		return []expr.Any{ifLoad(m.Out), lookup(m.Set, setIDs)}
	case nft.AddrMatch:
		return append(addrLoad(nft.AddrFamily(m.Addr), m.Src), cmp(m.Neg, m.Addr.AsSlice()))
	case nft.DaddrSetMatch:
		return append(addrLoad(m.Family, false), lookup(m.Set, setIDs))
	case nft.OwnerMatch:
		key := expr.MetaKeySKUID
		if m.GID {
			key = expr.MetaKeySKGID
		}
		// skuid and skgid compare in host byte order.
		return []expr.Any{&expr.Meta{Key: key, Register: reg}, cmp(m.Neg, binaryutil.NativeEndian.PutUint32(m.ID))}
	case nft.MarkMatch:
		out := []expr.Any{markLoad(m.CT)}
		if m.Mask != nft.FullMask {
			out = append(out, &expr.Bitwise{SourceRegister: reg, DestRegister: reg, Len: 4,
				Mask: binaryutil.NativeEndian.PutUint32(m.Mask), Xor: make([]byte, 4)})
		}
		return append(out, cmp(m.Neg, binaryutil.NativeEndian.PutUint32(m.Value)))
	case nft.EstablishedMatch:
		return ctStateExprs(expr.CtStateBitESTABLISHED | expr.CtStateBitRELATED)
	case nft.InvalidMatch:
		return ctStateExprs(expr.CtStateBitINVALID)
	case nft.LocalSourceMatch:
		return []expr.Any{
			&expr.Fib{Register: reg, FlagSADDR: true, ResultADDRTYPE: true},
			cmp(false, binaryutil.NativeEndian.PutUint32(unix.RTN_LOCAL)),
		}
	}
	panic(fmt.Sprintf("nft: no expressions for match %T", m))
}

// ctStateExprs is `ct state` having any of bits.
func ctStateExprs(bits uint32) []expr.Any {
	return []expr.Any{
		&expr.Ct{Register: reg, Key: expr.CtKeySTATE},
		&expr.Bitwise{SourceRegister: reg, DestRegister: reg, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(bits), Xor: make([]byte, 4)},
		cmp(true, make([]byte, 4)),
	}
}

func markLoad(ct bool) expr.Any {
	if ct {
		return &expr.Ct{Register: reg, Key: expr.CtKeyMARK}
	}
	return &expr.Meta{Key: expr.MetaKeyMARK, Register: reg}
}

func markStore(ct bool) expr.Any {
	if ct {
		return &expr.Ct{Register: reg, SourceRegister: true, Key: expr.CtKeyMARK}
	}
	return &expr.Meta{Key: expr.MetaKeyMARK, Register: reg, SourceRegister: true}
}

func stmtExprs(s nft.Stmt) []expr.Any {
	switch s := s.(type) {
	case nft.MarkSet:
		var load []expr.Any
		switch {
		case s.From == nft.FromCtMark:
			load = []expr.Any{markLoad(true)}
		case s.From == nft.FromMetaMark:
			load = []expr.Any{markLoad(false)}
		case s.Mask == nft.FullMask:
			load = []expr.Any{&expr.Immediate{Register: reg, Data: binaryutil.NativeEndian.PutUint32(s.Value)}}
		default:
			load = []expr.Any{markLoad(s.CT), &expr.Bitwise{SourceRegister: reg, DestRegister: reg, Len: 4,
				Mask: binaryutil.NativeEndian.PutUint32(^s.Mask), Xor: binaryutil.NativeEndian.PutUint32(s.Value)}}
		}
		return append(load, markStore(s.CT))
	case nft.TProxyStmt:
		fam := byte(unix.NFPROTO_UNSPEC)
		switch s.Family {
		case nft.IPv4:
			fam = unix.NFPROTO_IPV4
		case nft.IPv6:
			fam = unix.NFPROTO_IPV6
		}
		return []expr.Any{
			&expr.Immediate{Register: reg, Data: binaryutil.BigEndian.PutUint16(s.Port)},
			&expr.TProxy{Family: fam, TableFamily: byte(nftables.TableFamilyINet), RegPort: reg},
		}
	case nft.SNATStmt:
		fam := uint32(unix.NFPROTO_IPV4)
		if s.Addr.Is6() {
			fam = unix.NFPROTO_IPV6
		}
		return []expr.Any{
			&expr.Immediate{Register: reg, Data: s.Addr.AsSlice()},
			&expr.NAT{Type: expr.NATTypeSourceNAT, Family: fam, RegAddrMin: reg, RegAddrMax: reg},
		}
	case nft.CTZoneSet:
		// The zone is a 16-bit register value in host byte order.
		return []expr.Any{
			&expr.Immediate{Register: reg, Data: binaryutil.NativeEndian.PutUint16(s.Zone)},
			&expr.Ct{Register: reg, SourceRegister: true, Key: expr.CtKeyZONE},
		}
	}
	panic(fmt.Sprintf("nft: no expressions for statement %T", s))
}

func verdictExprs(v nft.Verdict) []expr.Any {
	switch v.Kind {
	case nft.VerdictNone:
		return nil
	case nft.VerdictAccept:
		return []expr.Any{&expr.Verdict{Kind: expr.VerdictAccept}}
	case nft.VerdictReturn:
		return []expr.Any{&expr.Verdict{Kind: expr.VerdictReturn}}
	case nft.VerdictDrop:
		return []expr.Any{&expr.Verdict{Kind: expr.VerdictDrop}}
	case nft.VerdictJump:
		return []expr.Any{&expr.Verdict{Kind: expr.VerdictJump, Chain: v.Chain}}
	case nft.VerdictRedirect:
		return []expr.Any{
			&expr.Immediate{Register: reg, Data: binaryutil.BigEndian.PutUint16(v.Port)},
			&expr.Redir{RegisterProtoMin: reg, Flags: unix.NF_NAT_RANGE_PROTO_SPECIFIED},
		}
	}
	panic(fmt.Sprintf("nft: no expressions for verdict kind %d", v.Kind))
}

func nfprotoExprs(f nft.Family) []expr.Any {
	proto := byte(unix.NFPROTO_IPV4)
	if f == nft.IPv6 {
		proto = unix.NFPROTO_IPV6
	}
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: reg},
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg, Data: []byte{proto}},
	}
}

func l4protoExprs(p nft.Proto) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: reg},
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg, Data: []byte{byte(p)}},
	}
}

// dportLoad pins the transport protocol (the inet table sees every
// protocol) and loads the destination port, at offset 2 in TCP and UDP.
func dportLoad(p nft.Proto) []expr.Any { return portLoad(p, false) }

// portLoad is dportLoad, or with src the source port (offset 0).
func portLoad(p nft.Proto, src bool) []expr.Any {
	offset := uint32(2)
	if src {
		offset = 0
	}
	return append(l4protoExprs(p),
		&expr.Payload{DestRegister: reg, Base: expr.PayloadBaseTransportHeader, Offset: offset, Len: 2})
}

func ifLoad(out bool) expr.Any {
	key := expr.MetaKeyIIFNAME
	if out {
		key = expr.MetaKeyOIFNAME
	}
	return &expr.Meta{Key: key, Register: reg}
}

// addrLoad pins the family and loads the source or destination address
// (IPv4 header offsets 12 and 16, IPv6 8 and 24).
func addrLoad(f nft.Family, src bool) []expr.Any {
	offset, size := uint32(16), uint32(4)
	if src {
		offset = 12
	}
	if f == nft.IPv6 {
		offset, size = 24, 16
		if src {
			offset = 8
		}
	}
	return append(nfprotoExprs(f),
		&expr.Payload{DestRegister: reg, Base: expr.PayloadBaseNetworkHeader, Offset: offset, Len: size})
}

func cmp(neg bool, data []byte) expr.Any {
	op := expr.CmpOpEq
	if neg {
		op = expr.CmpOpNeq
	}
	return &expr.Cmp{Op: op, Register: reg, Data: data}
}

func lookup(set string, setIDs map[string]uint32) expr.Any {
	return &expr.Lookup{SourceRegister: reg, SetName: set, SetID: setIDs[set]}
}

// chainTypes and chainHooks map the model's base-chain kinds to the
// kernel's; a kind missing here is one the model never builds.
var (
	chainTypes = map[nft.ChainType]nftables.ChainType{
		nft.TypeNAT: nftables.ChainTypeNAT, nft.TypeFilter: nftables.ChainTypeFilter, nft.TypeRoute: nftables.ChainTypeRoute,
	}
	chainHooks = map[nft.Hook]*nftables.ChainHook{
		nft.HookPrerouting: nftables.ChainHookPrerouting, nft.HookOutput: nftables.ChainHookOutput, nft.HookPostrouting: nftables.ChainHookPostrouting,
	}
)
