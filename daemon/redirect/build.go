package redirect

import (
	"net/netip"
	"slices"
)

// Chain names, the nftables counterparts of istio-iptables' chains.
const (
	chainPrerouting  = "prerouting"   // nat PREROUTING
	chainInbound     = "inbound"      // ISTIO_INBOUND
	chainInRedirect  = "in-redirect"  // ISTIO_IN_REDIRECT
	chainOutput      = "output"       // nat OUTPUT
	chainOutbound    = "outbound"     // ISTIO_OUTPUT
	chainOutRedirect = "out-redirect" // ISTIO_REDIRECT
	chainDNS         = "dns"          // the DNS rules istio-iptables keeps in OUTPUT
)

// Set names. A set exists only when its list is non-empty.
const (
	setInboundPass     = "inbound-pass-ports"
	setInboundInclude  = "inbound-include-ports"
	setInboundExclude  = "inbound-exclude-ports"
	setOutboundInclude = "outbound-include-ports"
	setOutboundExclude = "outbound-exclude-ports"
	setIncludeV4       = "outbound-include-v4"
	setIncludeV6       = "outbound-include-v6"
	setExcludeV4       = "outbound-exclude-v4"
	setExcludeV6       = "outbound-exclude-v6"
	setExcludeIfaces   = "exclude-interfaces"
)

const (
	dnsPort           = 53
	loopbackInterface = "lo"
)

var (
	loopbackV4 = netip.MustParseAddr("127.0.0.1")
	loopbackV6 = netip.IPv6Loopback()
)

// Build turns a Spec into the ruleset for table inet sluice. It is pure: no
// kernel, no I/O, the same Spec always gives the same Ruleset (and Hash).
func Build(s Spec) (*Ruleset, error) {
	if err := validate(s); err != nil {
		return nil, err
	}
	b := &builder{spec: s}
	b.addSets()
	b.chains = []chain{
		b.prerouting(),
		b.inbound(),
		{name: chainInRedirect, rules: []rule{{
			tag:     "in-redirect",
			matches: []match{l4protoMatch{tcp}},
			verdict: redirectTo(s.InboundPort),
		}}},
		b.output(),
		b.outbound(),
		{name: chainOutRedirect, rules: []rule{{
			tag:     "out-redirect",
			matches: []match{l4protoMatch{tcp}},
			verdict: redirectTo(s.OutboundPort),
		}}},
	}
	if s.CaptureDNS {
		b.chains = append(b.chains, b.dns())
	}
	return &Ruleset{sets: b.sets, chains: b.chains, text: render(b.sets, b.chains)}, nil
}

type builder struct {
	spec   Spec
	sets   []set
	chains []chain
}

// addSets declares every non-empty list as a named set; the chains then
// reference a set only when has says it exists.
func (b *builder) addSets() {
	s := b.spec
	ports := func(name string, p []uint16) {
		if len(p) > 0 {
			p = slices.Clone(p)
			slices.Sort(p)
			b.sets = append(b.sets, set{name: name, typ: setPorts, ports: slices.Compact(p)})
		}
	}
	cidrs := func(name string, fam family, all []netip.Prefix) {
		if p := normalisePrefixes(fam, all); len(p) > 0 {
			typ := setIPv4
			if fam == ipv6 {
				typ = setIPv6
			}
			b.sets = append(b.sets, set{name: name, typ: typ, prefixes: p})
		}
	}
	ports(setInboundPass, s.InboundPassPorts)
	ports(setInboundInclude, s.IncludeInboundPorts)
	ports(setInboundExclude, s.ExcludeInboundPorts)
	ports(setOutboundInclude, s.IncludeOutboundPorts)
	ports(setOutboundExclude, s.ExcludeOutboundPorts)
	cidrs(setIncludeV4, ipv4, s.IncludeOutboundCIDRs)
	cidrs(setIncludeV6, ipv6, s.IncludeOutboundCIDRs)
	cidrs(setExcludeV4, ipv4, s.ExcludeOutboundCIDRs)
	cidrs(setExcludeV6, ipv6, s.ExcludeOutboundCIDRs)
	if len(s.ExcludeInterfaces) > 0 {
		names := slices.Clone(s.ExcludeInterfaces)
		slices.Sort(names)
		b.sets = append(b.sets, set{name: setExcludeIfaces, typ: setIfnames, ifnames: slices.Compact(names)})
	}
}

func (b *builder) has(name string) bool {
	return slices.ContainsFunc(b.sets, func(s set) bool { return s.name == name })
}

// families are the address families captured.
func (b *builder) families() []family {
	var f []family
	if b.spec.IPv4 {
		f = append(f, ipv4)
	}
	if b.spec.IPv6 {
		f = append(f, ipv6)
	}
	return f
}

// familyGuard confines an entry rule to the one captured family; with both
// families on, the inet table sees both and no guard is needed.
func (b *builder) familyGuard() []match {
	if f := b.families(); len(f) == 1 {
		return []match{nfprotoMatch{f[0]}}
	}
	return nil
}

func (b *builder) prerouting() chain {
	c := chain{name: chainPrerouting, hook: hookPrerouting}
	if b.has(setExcludeIfaces) {
		c.rules = append(c.rules, rule{
			tag:     "skip-excluded-interfaces-in",
			matches: []match{ifSetMatch{out: false, set: setExcludeIfaces}},
			verdict: ret(),
		})
	}
	c.rules = append(c.rules, rule{
		tag:     "inbound-tcp",
		matches: append(b.familyGuard(), l4protoMatch{tcp}),
		verdict: jump(chainInbound),
	})
	return c
}

func (b *builder) inbound() chain {
	c := chain{name: chainInbound}
	for _, r := range []struct{ set, tag string }{
		{setInboundPass, "inbound-pass-ports"},
		{setInboundExclude, "inbound-exclude-ports"},
	} {
		if b.has(r.set) {
			c.rules = append(c.rules, rule{tag: r.tag, matches: []match{portSetMatch{tcp, r.set}}, verdict: ret()})
		}
	}
	if b.has(setInboundInclude) {
		c.rules = append(c.rules, rule{
			tag:     "inbound-include-ports",
			matches: []match{portSetMatch{tcp, setInboundInclude}},
			verdict: jump(chainInRedirect),
		})
	} else {
		c.rules = append(c.rules, rule{
			tag:     "inbound-all-ports",
			matches: []match{l4protoMatch{tcp}},
			verdict: jump(chainInRedirect),
		})
	}
	return c
}

func (b *builder) output() chain {
	c := chain{name: chainOutput, hook: hookOutput}
	if b.has(setExcludeIfaces) {
		c.rules = append(c.rules, rule{
			tag:     "skip-excluded-interfaces-out",
			matches: []match{ifSetMatch{out: true, set: setExcludeIfaces}},
			verdict: ret(),
		})
	}
	if b.spec.CaptureDNS {
		// UDP never enters the outbound chain (it is TCP's, as
		// ISTIO_OUTPUT is), so DNS over UDP is diverted here.
		c.rules = append(c.rules, rule{
			tag:     "dns-udp",
			matches: append(b.familyGuard(), portMatch{proto: udp, port: dnsPort}),
			verdict: jump(chainDNS),
		})
	}
	c.rules = append(c.rules, rule{
		tag:     "outbound-tcp",
		matches: append(b.familyGuard(), l4protoMatch{tcp}),
		verdict: jump(chainOutbound),
	})
	return c
}

// outbound is ISTIO_OUTPUT, in istio-iptables' order; the order is the
// semantics, each rule only sees what the ones before it let through.
func (b *builder) outbound() chain {
	s := b.spec
	c := chain{name: chainOutbound}
	add := func(tag string, v verdict, m ...match) {
		c.rules = append(c.rules, rule{tag: tag, matches: m, verdict: v})
	}
	lo := ifMatch{out: true, name: loopbackInterface}

	// Port exclusions come before the loopback rules below, so the proxy
	// calling its own pod on an excluded port is not sent to inbound.
	if b.has(setOutboundExclude) {
		add("outbound-exclude-ports", ret(), portSetMatch{tcp, setOutboundExclude})
	}
	for _, f := range b.families() {
		add("inbound-passthrough"+f.tagSuffix(), ret(), lo, addrMatch{src: true, addr: b.passthrough(f)})
	}
	for _, owner := range []struct {
		name string
		gid  bool
		id   uint32
	}{{"uid", false, s.ProxyUID}, {"gid", true, s.ProxyGID}} {
		proxy := ownerMatch{gid: owner.gid, id: owner.id}
		// The app called itself through a service VIP and the proxy is
		// now forwarding that over loopback: it must enter as inbound.
		// HBONE to ourselves is the proxy's own tunnel and is left alone.
		for _, f := range b.families() {
			add("proxy-"+owner.name+"-to-self"+f.tagSuffix(), jump(chainInRedirect),
				lo, addrMatch{neg: true, addr: f.loopback()}, portMatch{proto: tcp, neg: true, port: s.HBONEPort}, proxy)
		}
		// The app calling itself by its endpoint address over loopback.
		add("app-"+owner.name+"-loopback", ret(), lo, ownerMatch{gid: owner.gid, neg: true, id: owner.id})
		// The proxy's own outbound traffic: capturing it would loop.
		add("proxy-"+owner.name, ret(), proxy)
	}
	if s.CaptureDNS {
		add("dns-tcp", jump(chainDNS), portMatch{proto: tcp, port: dnsPort})
	}
	for _, f := range b.families() {
		add("localhost"+f.tagSuffix(), ret(), addrMatch{addr: f.loopback()})
	}
	for _, x := range []struct {
		set string
		fam family
	}{{setExcludeV4, ipv4}, {setExcludeV6, ipv6}} {
		if b.has(x.set) {
			add(x.set, ret(), daddrSetMatch{x.fam, x.set})
		}
	}
	if b.has(setOutboundInclude) {
		add("outbound-include-ports", jump(chainOutRedirect), portSetMatch{tcp, setOutboundInclude})
	}
	if len(s.IncludeOutboundCIDRs) == 0 {
		add("outbound-all", jump(chainOutRedirect))
		return c
	}
	for _, x := range []struct {
		set string
		fam family
	}{{setIncludeV4, ipv4}, {setIncludeV6, ipv6}} {
		if b.has(x.set) {
			add(x.set, jump(chainOutRedirect), daddrSetMatch{x.fam, x.set})
		}
	}
	return c
}

// dns sends DNS to the proxy's DNS listener unless the proxy itself is
// the one asking (it resolves upstream for everyone else).
func (b *builder) dns() chain {
	s := b.spec
	return chain{name: chainDNS, rules: []rule{
		{tag: "dns-proxy-uid", matches: []match{ownerMatch{id: s.ProxyUID}}, verdict: ret()},
		{tag: "dns-proxy-gid", matches: []match{ownerMatch{gid: true, id: s.ProxyGID}}, verdict: ret()},
		{tag: "dns-redirect-tcp", matches: []match{l4protoMatch{tcp}}, verdict: redirectTo(s.DNSPort)},
		{tag: "dns-redirect-udp", matches: []match{l4protoMatch{udp}}, verdict: redirectTo(s.DNSPort)},
	}}
}

func (b *builder) passthrough(f family) netip.Addr {
	if f == ipv6 {
		return b.spec.InboundPassthroughIPv6
	}
	return b.spec.InboundPassthroughIPv4
}

func (f family) loopback() netip.Addr {
	if f == ipv6 {
		return loopbackV6
	}
	return loopbackV4
}

func (f family) tagSuffix() string {
	if f == ipv6 {
		return "-v6"
	}
	return "-v4"
}

func addrFamily(a netip.Addr) family {
	if a.Is4() {
		return ipv4
	}
	return ipv6
}

// normalisePrefixes keeps fam's prefixes, masked, sorted, without any that
// lie inside another: an interval set refuses overlapping elements.
func normalisePrefixes(fam family, all []netip.Prefix) []netip.Prefix {
	var out []netip.Prefix
	for _, p := range all {
		if addrFamily(p.Addr()) == fam {
			out = append(out, p.Masked())
		}
	}
	slices.SortFunc(out, func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return a.Bits() - b.Bits()
	})
	kept := out[:0]
	for _, p := range out {
		// Sorted by address then length, a prefix inside another comes
		// after it, and prefixes nest or are disjoint, so checking the
		// last one kept is enough.
		if n := len(kept); n > 0 && kept[n-1].Bits() <= p.Bits() && kept[n-1].Contains(p.Addr()) {
			continue
		}
		kept = append(kept, p)
	}
	return kept
}
