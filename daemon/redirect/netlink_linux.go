package redirect

import (
	"fmt"
	"net/netip"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/userdata"
	"golang.org/x/sys/unix"
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

func nlSet(table *nftables.Table, s set, id uint32) (*nftables.Set, []nftables.SetElement) {
	ns := &nftables.Set{
		Table: table,
		Name:  s.name,
		// A fixed, non-zero ID keeps AddSet from drawing one from
		// google/nftables' package-global counter, which is not safe to
		// touch from concurrent Applies. IDs only need to be unique
		// within one batch.
		ID:           id,
		KeyByteOrder: binaryutil.BigEndian,
	}
	var elems []nftables.SetElement
	switch s.typ {
	case setPorts:
		ns.KeyType = nftables.TypeInetService
		for _, p := range s.ports {
			elems = append(elems, nftables.SetElement{Key: binaryutil.BigEndian.PutUint16(p)})
		}
	case setIPv4, setIPv6:
		ns.KeyType = nftables.TypeIPAddr
		if s.typ == setIPv6 {
			ns.KeyType = nftables.TypeIP6Addr
		}
		ns.Interval = true
		elems = intervalElements(s.prefixes)
	case setIPv4Addrs:
		ns.KeyType = nftables.TypeIPAddr
	case setIPv6Addrs:
		ns.KeyType = nftables.TypeIP6Addr
	case setIfnames:
		ns.KeyType = nftables.TypeIFName
		// nft keeps strings in host byte order and, told otherwise by the
		// set's userdata, lists the names as empty strings.
		ns.KeyByteOrder = binaryutil.NativeEndian
		for _, n := range s.ifnames {
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

func nlChain(table *nftables.Table, c chain) *nftables.Chain {
	nc := &nftables.Chain{Name: c.name, Table: table}
	if c.hook != 0 {
		accept := nftables.ChainPolicyAccept
		prio := nftables.ChainPriority(c.prio)
		nc.Priority = &prio
		nc.Policy = &accept
		switch c.typ {
		case typeNAT:
			nc.Type = nftables.ChainTypeNAT
		case typeFilter:
			nc.Type = nftables.ChainTypeFilter
		case typeRoute:
			nc.Type = nftables.ChainTypeRoute
		}
		switch c.hook {
		case hookPrerouting:
			nc.Hooknum = nftables.ChainHookPrerouting
		case hookOutput:
			nc.Hooknum = nftables.ChainHookOutput
		case hookPostrouting:
			nc.Hooknum = nftables.ChainHookPostrouting
		}
	}
	return nc
}

// ruleTag is the rule's userdata: its tag as an nft comment, so `nft list`
// shows it and Verify can find the rule again.
func ruleTag(tag string) []byte {
	return userdata.AppendString(nil, userdata.TypeComment, tag)
}

func ruleExprs(r rule, setIDs map[string]uint32) []expr.Any {
	var out []expr.Any
	for _, m := range r.matches {
		out = append(out, matchExprs(m, setIDs)...)
	}
	for _, st := range r.stmts {
		out = append(out, stmtExprs(st)...)
	}
	return append(out, verdictExprs(r.verdict)...)
}

func matchExprs(m match, setIDs map[string]uint32) []expr.Any {
	switch m := m.(type) {
	case nfprotoMatch:
		return nfprotoExprs(m.fam)
	case l4protoMatch:
		return l4protoExprs(m.proto)
	case portMatch:
		return append(dportLoad(m.proto), cmp(m.neg, binaryutil.BigEndian.PutUint16(m.port)))
	case portSetMatch:
		return append(dportLoad(m.proto), lookup(m.set, setIDs))
	case ifMatch:
		return []expr.Any{ifLoad(m.out), cmp(m.neg, ifname(m.name))}
	case ifSetMatch:
		return []expr.Any{ifLoad(m.out), lookup(m.set, setIDs)}
	case addrMatch:
		return append(addrLoad(addrFamily(m.addr), m.src), cmp(m.neg, m.addr.AsSlice()))
	case daddrSetMatch:
		return append(addrLoad(m.fam, false), lookup(m.set, setIDs))
	case ownerMatch:
		key := expr.MetaKeySKUID
		if m.gid {
			key = expr.MetaKeySKGID
		}
		// skuid and skgid compare in host byte order.
		return []expr.Any{&expr.Meta{Key: key, Register: reg}, cmp(m.neg, binaryutil.NativeEndian.PutUint32(m.id))}
	case markMatch:
		out := []expr.Any{markLoad(m.ct)}
		if m.mask != fullMask {
			out = append(out, &expr.Bitwise{SourceRegister: reg, DestRegister: reg, Len: 4,
				Mask: binaryutil.NativeEndian.PutUint32(m.mask), Xor: make([]byte, 4)})
		}
		return append(out, cmp(m.neg, binaryutil.NativeEndian.PutUint32(m.value)))
	case establishedMatch:
		bits := uint32(expr.CtStateBitESTABLISHED | expr.CtStateBitRELATED)
		return []expr.Any{
			&expr.Ct{Register: reg, Key: expr.CtKeySTATE},
			&expr.Bitwise{SourceRegister: reg, DestRegister: reg, Len: 4,
				Mask: binaryutil.NativeEndian.PutUint32(bits), Xor: make([]byte, 4)},
			cmp(true, make([]byte, 4)),
		}
	case localSourceMatch:
		return []expr.Any{
			&expr.Fib{Register: reg, FlagSADDR: true, ResultADDRTYPE: true},
			cmp(false, binaryutil.NativeEndian.PutUint32(unix.RTN_LOCAL)),
		}
	}
	panic(fmt.Sprintf("redirect: no expressions for match %T", m))
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

func stmtExprs(s stmt) []expr.Any {
	switch s := s.(type) {
	case markSet:
		var load []expr.Any
		switch {
		case s.from == fromCtMark:
			load = []expr.Any{markLoad(true)}
		case s.from == fromMetaMark:
			load = []expr.Any{markLoad(false)}
		case s.mask == fullMask:
			load = []expr.Any{&expr.Immediate{Register: reg, Data: binaryutil.NativeEndian.PutUint32(s.value)}}
		default:
			load = []expr.Any{markLoad(s.ct), &expr.Bitwise{SourceRegister: reg, DestRegister: reg, Len: 4,
				Mask: binaryutil.NativeEndian.PutUint32(^s.mask), Xor: binaryutil.NativeEndian.PutUint32(s.value)}}
		}
		return append(load, markStore(s.ct))
	case tproxyStmt:
		fam := byte(unix.NFPROTO_UNSPEC)
		switch s.fam {
		case ipv4:
			fam = unix.NFPROTO_IPV4
		case ipv6:
			fam = unix.NFPROTO_IPV6
		}
		return []expr.Any{
			&expr.Immediate{Register: reg, Data: binaryutil.BigEndian.PutUint16(s.port)},
			&expr.TProxy{Family: fam, TableFamily: byte(nftables.TableFamilyINet), RegPort: reg},
		}
	case snatStmt:
		fam := uint32(unix.NFPROTO_IPV4)
		if s.addr.Is6() {
			fam = unix.NFPROTO_IPV6
		}
		return []expr.Any{
			&expr.Immediate{Register: reg, Data: s.addr.AsSlice()},
			&expr.NAT{Type: expr.NATTypeSourceNAT, Family: fam, RegAddrMin: reg, RegAddrMax: reg},
		}
	}
	panic(fmt.Sprintf("redirect: no expressions for statement %T", s))
}

func verdictExprs(v verdict) []expr.Any {
	switch v.kind {
	case verdictNone:
		return nil
	case verdictAccept:
		return []expr.Any{&expr.Verdict{Kind: expr.VerdictAccept}}
	case verdictReturn:
		return []expr.Any{&expr.Verdict{Kind: expr.VerdictReturn}}
	case verdictJump:
		return []expr.Any{&expr.Verdict{Kind: expr.VerdictJump, Chain: v.chain}}
	case verdictRedirect:
		return []expr.Any{
			&expr.Immediate{Register: reg, Data: binaryutil.BigEndian.PutUint16(v.port)},
			&expr.Redir{RegisterProtoMin: reg, Flags: unix.NF_NAT_RANGE_PROTO_SPECIFIED},
		}
	}
	panic(fmt.Sprintf("redirect: no expressions for verdict kind %d", v.kind))
}

func nfprotoExprs(f family) []expr.Any {
	proto := byte(unix.NFPROTO_IPV4)
	if f == ipv6 {
		proto = unix.NFPROTO_IPV6
	}
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: reg},
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg, Data: []byte{proto}},
	}
}

func l4protoExprs(p l4proto) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: reg},
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg, Data: []byte{byte(p)}},
	}
}

// dportLoad pins the transport protocol (the inet table sees every
// protocol) and loads the destination port, at offset 2 in TCP and UDP.
func dportLoad(p l4proto) []expr.Any {
	return append(l4protoExprs(p),
		&expr.Payload{DestRegister: reg, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2})
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
func addrLoad(f family, src bool) []expr.Any {
	offset, size := uint32(16), uint32(4)
	if src {
		offset = 12
	}
	if f == ipv6 {
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
