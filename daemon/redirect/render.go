package redirect

import (
	"fmt"
	"strconv"
	"strings"
)

// render writes the ruleset the way `nft list table inet <table>` prints it
// (nft 1.0.x): sets first, then chains, a blank line between blocks. The
// result is also valid `nft -f` input. nft wraps long element lists; apart
// from that whitespace the kernel's listing and this text are the same,
// which the Linux tests check.
func render(table string, sets []set, chains []chain) string {
	var b strings.Builder
	fmt.Fprintf(&b, "table inet %s {\n", table)
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
	case setIPv4Addrs:
		b.WriteString("\t\ttype ipv4_addr\n")
	case setIPv6Addrs:
		b.WriteString("\t\ttype ipv6_addr\n")
	}
	if len(elems) > 0 {
		fmt.Fprintf(b, "\t\telements = { %s }\n", strings.Join(elems, ", "))
	}
	b.WriteString("\t}\n")
}

func renderChain(b *strings.Builder, c chain) {
	fmt.Fprintf(b, "\tchain %s {\n", c.name)
	if c.hook != 0 {
		fmt.Fprintf(b, "\t\ttype %s hook %s priority %s; policy accept;\n", c.typ, c.hook, priorityText(c.hook, c.prio))
	}
	for _, r := range c.rules {
		b.WriteString("\t\t")
		b.WriteString(r.text())
		b.WriteString("\n")
	}
	b.WriteString("\t}\n")
}

// priorityText is how nft prints a base chain's priority: by name where
// it has one for that hook, else as a number (dstnat is only a name on
// prerouting, srcnat only on postrouting).
func priorityText(h hookKind, prio int) string {
	switch {
	case prio == manglePriority:
		return "mangle"
	case prio == natDstPriority && h == hookPrerouting:
		return "dstnat"
	case prio == natSrcPriority && h == hookPostrouting:
		return "srcnat"
	}
	return strconv.Itoa(prio)
}

func (t chainType) String() string {
	switch t {
	case typeFilter:
		return "filter"
	case typeRoute:
		return "route"
	}
	return "nat"
}

func (h hookKind) String() string {
	switch h {
	case hookPrerouting:
		return "prerouting"
	case hookOutput:
		return "output"
	}
	return "postrouting"
}

// text is the rule as one nft statement line.
func (r rule) text() string {
	parts := make([]string, 0, len(r.matches)+len(r.stmts)+2)
	for _, m := range r.matches {
		parts = append(parts, matchText(m))
	}
	for _, s := range r.stmts {
		parts = append(parts, stmtText(s))
	}
	if r.verdict.kind != verdictNone {
		parts = append(parts, r.verdict.text())
	}
	parts = append(parts, "comment "+strconv.Quote(r.tag))
	return strings.Join(parts, " ")
}

// renderRoutes writes the policy routes as `ip` commands in nft comments.
func renderRoutes(routes []policyRoute) string {
	if len(routes) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("# policy routing, programmed with the table:\n")
	for _, r := range routes {
		fmt.Fprintf(&b, "# ip %s rule add fwmark %#x/%#x lookup %d pref %d\n", r.fam.ipFlag(), r.mark, r.mask, r.table, r.priority)
		fmt.Fprintf(&b, "# ip %s route add local %s dev %s table %d\n", r.fam.ipFlag(), r.fam.defaultPrefix(), loopbackInterface, r.table)
	}
	return b.String()
}

func stmtText(s stmt) string {
	switch s := s.(type) {
	case markSet:
		key := markKey(s.ct)
		switch {
		case s.from == fromCtMark:
			return key + " set ct mark"
		case s.from == fromMetaMark:
			return key + " set meta mark"
		case s.mask == fullMask:
			return fmt.Sprintf("%s set 0x%08x", key, s.value)
		}
		// The kernel does (mark & ^mask) ^ value; nft folds the value
		// into the mask it prints.
		return fmt.Sprintf("%s set %s & 0x%08x | 0x%08x", key, key, ^s.mask|s.value, s.value)
	case tproxyStmt:
		fam := ""
		if s.fam != 0 {
			fam = s.fam.payloadName() + " "
		}
		return "tproxy " + fam + "to :" + strconv.Itoa(int(s.port))
	case snatStmt:
		return "snat " + addrFamily(s.addr).payloadName() + " to " + s.addr.String()
	}
	panic(fmt.Sprintf("redirect: no text for statement %T", s))
}

func markKey(ct bool) string {
	if ct {
		return "ct mark"
	}
	return "meta mark"
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
	case markMatch:
		if m.mask == fullMask {
			return fmt.Sprintf("%s %s0x%08x", markKey(m.ct), neg(m.neg), m.value)
		}
		op := "=="
		if m.neg {
			op = "!="
		}
		return fmt.Sprintf("%s & 0x%08x %s 0x%08x", markKey(m.ct), m.mask, op, m.value)
	case establishedMatch:
		return "ct state established,related"
	case localSourceMatch:
		return "fib saddr type local"
	}
	panic(fmt.Sprintf("redirect: no text for match %T", m))
}

func (v verdict) text() string {
	switch v.kind {
	case verdictReturn:
		return "return"
	case verdictAccept:
		return "accept"
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

// ipFlag is the `ip` command's family option.
func (f family) ipFlag() string {
	if f == ipv6 {
		return "-6"
	}
	return "-4"
}

func (f family) defaultPrefix() string {
	if f == ipv6 {
		return "::/0"
	}
	return "0.0.0.0/0"
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
