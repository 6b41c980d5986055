package redirect

import (
	"fmt"
	"strconv"
	"strings"
)

// render writes the ruleset the way `nft list table inet sluice` prints it
// (nft 1.0.x): sets first, then chains, a blank line between blocks. The
// result is also valid `nft -f` input. nft wraps long element lists; apart
// from that whitespace the kernel's listing and this text are the same,
// which the Linux tests check.
func render(sets []set, chains []chain) string {
	var b strings.Builder
	fmt.Fprintf(&b, "table inet %s {\n", TableName)
	first := true
	block := func() {
		if !first {
			b.WriteString("\n")
		}
		first = false
	}
	for _, s := range sets {
		block()
		renderSet(&b, s)
	}
	for _, c := range chains {
		block()
		renderChain(&b, c)
	}
	b.WriteString("}\n")
	return b.String()
}

func renderSet(b *strings.Builder, s set) {
	fmt.Fprintf(b, "\tset %s {\n", s.name)
	var elems []string
	switch s.typ {
	case setPorts:
		b.WriteString("\t\ttype inet_service\n")
		for _, p := range s.ports {
			elems = append(elems, strconv.Itoa(int(p)))
		}
	case setIPv4, setIPv6:
		if s.typ == setIPv4 {
			b.WriteString("\t\ttype ipv4_addr\n")
		} else {
			b.WriteString("\t\ttype ipv6_addr\n")
		}
		b.WriteString("\t\tflags interval\n")
		for _, p := range s.prefixes {
			// nft prints a single-address interval as the bare address.
			if p.IsSingleIP() {
				elems = append(elems, p.Addr().String())
			} else {
				elems = append(elems, p.String())
			}
		}
	case setIfnames:
		b.WriteString("\t\ttype ifname\n")
		for _, n := range s.ifnames {
			elems = append(elems, strconv.Quote(n))
		}
	}
	fmt.Fprintf(b, "\t\telements = { %s }\n", strings.Join(elems, ", "))
	b.WriteString("\t}\n")
}

func renderChain(b *strings.Builder, c chain) {
	fmt.Fprintf(b, "\tchain %s {\n", c.name)
	switch c.hook {
	case hookPrerouting:
		// nft names the standard priority only for prerouting; it prints
		// the same value on the output hook as a number.
		b.WriteString("\t\ttype nat hook prerouting priority dstnat; policy accept;\n")
	case hookOutput:
		fmt.Fprintf(b, "\t\ttype nat hook output priority %d; policy accept;\n", natDstPriority)
	}
	for _, r := range c.rules {
		b.WriteString("\t\t")
		b.WriteString(r.text())
		b.WriteString("\n")
	}
	b.WriteString("\t}\n")
}

// text is the rule as one nft statement line.
func (r rule) text() string {
	parts := make([]string, 0, len(r.matches)+2)
	for _, m := range r.matches {
		parts = append(parts, matchText(m))
	}
	parts = append(parts, r.verdict.text(), "comment "+strconv.Quote(r.tag))
	return strings.Join(parts, " ")
}

func matchText(m match) string {
	switch m := m.(type) {
	case nfprotoMatch:
		return "meta nfproto " + m.fam.String()
	case l4protoMatch:
		return "meta l4proto " + m.proto.String()
	case portMatch:
		return m.proto.String() + " dport " + neg(m.neg) + strconv.Itoa(int(m.port))
	case portSetMatch:
		return m.proto.String() + " dport @" + m.set
	case ifMatch:
		return ifKey(m.out) + " " + neg(m.neg) + strconv.Quote(m.name)
	case ifSetMatch:
		return ifKey(m.out) + " @" + m.set
	case addrMatch:
		field := "daddr"
		if m.src {
			field = "saddr"
		}
		return addrFamily(m.addr).payloadName() + " " + field + " " + neg(m.neg) + m.addr.String()
	case daddrSetMatch:
		return m.fam.payloadName() + " daddr @" + m.set
	case ownerMatch:
		key := "skuid"
		if m.gid {
			key = "skgid"
		}
		return "meta " + key + " " + neg(m.neg) + strconv.FormatUint(uint64(m.id), 10)
	}
	panic(fmt.Sprintf("redirect: no text for match %T", m))
}

func (v verdict) text() string {
	switch v.kind {
	case verdictReturn:
		return "return"
	case verdictJump:
		return "jump " + v.chain
	case verdictRedirect:
		return "redirect to :" + strconv.Itoa(int(v.port))
	}
	panic(fmt.Sprintf("redirect: no text for verdict kind %d", v.kind))
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

func (f family) String() string {
	if f == ipv6 {
		return "ipv6"
	}
	return "ipv4"
}

// payloadName is the nft protocol keyword for the family's header.
func (f family) payloadName() string {
	if f == ipv6 {
		return "ip6"
	}
	return "ip"
}

func (p l4proto) String() string {
	if p == udp {
		return "udp"
	}
	return "tcp"
}
