package nft

import (
	"fmt"
	"strconv"
	"strings"
)

// Render writes the table the way `nft list table inet <name>` prints it
// (nft 1.0.x): sets first, then chains, a blank line between blocks. The
// result is also valid `nft -f` input. nft wraps long element lists; apart
// from that whitespace the kernel's listing and this text are the same,
// which the Linux tests check.
func (t *Table) Render() string {
	var b strings.Builder
	fmt.Fprintf(&b, "table inet %s {\n", t.Name)
	first := true
	block := func() {
		if !first {
			b.WriteString("\n")
		}
		first = false
	}
	for _, s := range t.Sets {
		block()
		renderSet(&b, s)
	}
	for _, c := range t.Chains {
		block()
		renderChain(&b, c)
	}
	b.WriteString("}\n")
	return b.String()
}

func renderSet(b *strings.Builder, s Set) {
	fmt.Fprintf(b, "\tset %s {\n", s.Name)
	var elems []string
	switch s.Type {
	case SetPorts:
		b.WriteString("\t\ttype inet_service\n")
		for _, p := range s.Ports {
			elems = append(elems, strconv.Itoa(int(p)))
		}
	case SetIPv4, SetIPv6:
		if s.Type == SetIPv4 {
			b.WriteString("\t\ttype ipv4_addr\n")
		} else {
			b.WriteString("\t\ttype ipv6_addr\n")
		}
		b.WriteString("\t\tflags interval\n")
		for _, p := range s.Prefixes {
			// nft prints a single-address interval as the bare address.
			if p.IsSingleIP() {
				elems = append(elems, p.Addr().String())
			} else {
				elems = append(elems, p.String())
			}
		}
	case SetIfnames:
		b.WriteString("\t\ttype ifname\n")
		for _, n := range s.Ifnames {
			elems = append(elems, strconv.Quote(n))
		}
	case SetIPv4Addrs:
		b.WriteString("\t\ttype ipv4_addr\n")
	case SetIPv6Addrs:
		b.WriteString("\t\ttype ipv6_addr\n")
	}
	if len(elems) > 0 {
		fmt.Fprintf(b, "\t\telements = { %s }\n", strings.Join(elems, ", "))
	}
	b.WriteString("\t}\n")
}

func renderChain(b *strings.Builder, c Chain) {
	fmt.Fprintf(b, "\tchain %s {\n", c.Name)
	if c.Hook != 0 {
		fmt.Fprintf(b, "\t\ttype %s hook %s priority %s; policy accept;\n", c.Type, c.Hook, priorityText(c.Hook, c.Priority))
	}
	for _, r := range c.Rules {
		b.WriteString("\t\t")
		b.WriteString(r.Text())
		b.WriteString("\n")
	}
	b.WriteString("\t}\n")
}

// priorityText is how nft prints a base chain's priority: by name where
// it has one for that hook, else as a number (dstnat is only a name on
// prerouting, srcnat only on postrouting).
func priorityText(h Hook, prio int) string {
	switch {
	case prio == rawPriority:
		return "raw"
	case prio == manglePriority:
		return "mangle"
	case prio == natDstPriority && h == HookPrerouting:
		return "dstnat"
	case prio == natSrcPriority && h == HookPostrouting:
		return "srcnat"
	}
	return strconv.Itoa(prio)
}

func (t ChainType) String() string {
	switch t {
	case TypeFilter:
		return "filter"
	case TypeRoute:
		return "route"
	}
	return "nat"
}

func (h Hook) String() string {
	switch h {
	case HookPrerouting:
		return "prerouting"
	case HookOutput:
		return "output"
	}
	return "postrouting"
}

// Text is the rule as one nft statement line, as Render writes it
// (and drift reports quote it).
func (r Rule) Text() string {
	parts := make([]string, 0, len(r.Matches)+len(r.Stmts)+2)
	for _, m := range r.Matches {
		parts = append(parts, matchText(m))
	}
	for _, s := range r.Stmts {
		parts = append(parts, stmtText(s))
	}
	if r.Verdict.Kind != VerdictNone {
		parts = append(parts, r.Verdict.text())
	}
	parts = append(parts, "comment "+strconv.Quote(r.Tag))
	return strings.Join(parts, " ")
}

func stmtText(s Stmt) string {
	switch s := s.(type) {
	case MarkSet:
		key := markKey(s.CT)
		switch {
		case s.From == FromCtMark:
			return key + " set ct mark"
		case s.From == FromMetaMark:
			return key + " set meta mark"
		case s.Mask == FullMask:
			return fmt.Sprintf("%s set 0x%08x", key, s.Value)
		}
		// The kernel does (mark & ^mask) ^ value; nft folds the value
		// into the mask it prints.
		return fmt.Sprintf("%s set %s & 0x%08x | 0x%08x", key, key, ^s.Mask|s.Value, s.Value)
	case TProxyStmt:
		fam := ""
		if s.Family != 0 {
			fam = s.Family.payloadName() + " "
		}
		return "tproxy " + fam + "to :" + strconv.Itoa(int(s.Port))
	case SNATStmt:
		return "snat " + AddrFamily(s.Addr).payloadName() + " to " + s.Addr.String()
	case CTZoneSet:
		return "ct zone set " + strconv.Itoa(int(s.Zone))
	}
	panic(fmt.Sprintf("nft: no text for statement %T", s))
}

func markKey(ct bool) string {
	if ct {
		return "ct mark"
	}
	return "meta mark"
}

func matchText(m Match) string {
	switch m := m.(type) {
	case NFProtoMatch:
		return "meta nfproto " + m.Family.String()
	case L4ProtoMatch:
		return "meta l4proto " + m.Proto.String()
	case PortMatch:
		field := " dport "
		if m.Src {
			field = " sport "
		}
		return m.Proto.String() + field + neg(m.Neg) + strconv.Itoa(int(m.Port))
	case PortSetMatch:
		return m.Proto.String() + " dport @" + m.Set
	case IfMatch:
		return ifKey(m.Out) + " " + neg(m.Neg) + strconv.Quote(m.Name)
	case IfSetMatch:
		return ifKey(m.Out) + " @" + m.Set
	case AddrMatch:
		field := "daddr"
		if m.Src {
			field = "saddr"
		}
		return AddrFamily(m.Addr).payloadName() + " " + field + " " + neg(m.Neg) + m.Addr.String()
	case DaddrSetMatch:
		return m.Family.payloadName() + " daddr @" + m.Set
	case OwnerMatch:
		key := "skuid"
		if m.GID {
			key = "skgid"
		}
		return "meta " + key + " " + neg(m.Neg) + strconv.FormatUint(uint64(m.ID), 10)
	case MarkMatch:
		if m.Mask == FullMask {
			return fmt.Sprintf("%s %s0x%08x", markKey(m.CT), neg(m.Neg), m.Value)
		}
		op := "=="
		if m.Neg {
			op = "!="
		}
		return fmt.Sprintf("%s & 0x%08x %s 0x%08x", markKey(m.CT), m.Mask, op, m.Value)
	case EstablishedMatch:
		return "ct state established,related"
	case InvalidMatch:
		return "ct state invalid"
	case LocalSourceMatch:
		return "fib saddr type local"
	}
	panic(fmt.Sprintf("nft: no text for match %T", m))
}

func (v Verdict) text() string {
	switch v.Kind {
	case VerdictReturn:
		return "return"
	case VerdictAccept:
		return "accept"
	case VerdictJump:
		return "jump " + v.Chain
	case VerdictRedirect:
		return "redirect to :" + strconv.Itoa(int(v.Port))
	case VerdictDrop:
		return "drop"
	}
	panic(fmt.Sprintf("nft: no text for verdict kind %d", v.Kind))
}

func neg(n bool) string {
	if n {
		return "!= "
	}
	return ""
}

func ifKey(out bool) string {
	if out {
		return "oifname"
	}
	return "iifname"
}

func (f Family) String() string {
	if f == IPv6 {
		return "ipv6"
	}
	return "ipv4"
}

// payloadName is the nft protocol keyword for the family's header.
func (f Family) payloadName() string {
	if f == IPv6 {
		return "ip6"
	}
	return "ip"
}

func (p Proto) String() string {
	if p == UDP {
		return "udp"
	}
	return "tcp"
}
