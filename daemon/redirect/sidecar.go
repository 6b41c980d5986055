package redirect

// The sidecar mode: istio-iptables' rules for an Envoy sidecar, chain for
// chain. REDIRECT sends inbound and outbound TCP through nat; TPROXY
// (tproxy.go) takes inbound through mangle instead and keeps outbound on
// REDIRECT, as istio-iptables does.

func (b *builder) sidecar() {
	s := b.spec
	b.addSets()
	inbound := !s.IncludeNoInboundPorts
	tproxy := inbound && s.Interception == InterceptTProxy
	switch {
	case tproxy:
		b.chains = append(b.chains, b.tproxyPrerouting(), b.tproxyInbound(), b.divert(), b.tproxy())
	case inbound:
		b.chains = append(b.chains, b.prerouting(), b.inbound())
	}
	// The proxy forwarding to its own pod is redirected to the inbound
	// listener from the nat output chain in every interception mode.
	b.chains = append(b.chains, chain{name: chainInRedirect, rules: []rule{{
		tag:     "in-redirect",
		matches: []match{l4protoMatch{tcp}},
		verdict: redirectTo(s.InboundPort),
	}}})
	if tproxy {
		b.chains = append(b.chains, b.tproxyOutputMark())
		b.routes = b.policyRoutes()
	}
	b.chains = append(b.chains, b.output(), b.outbound(), chain{name: chainOutRedirect, rules: []rule{{
		tag:     "out-redirect",
		matches: []match{l4protoMatch{tcp}},
		verdict: redirectTo(s.OutboundPort),
	}}})
	if s.CaptureDNS {
		b.chains = append(b.chains, b.dns())
	}
}

func (b *builder) prerouting() chain {
	c := natChain(chainPrerouting, hookPrerouting)
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
	c := natChain(chainOutput, hookOutput)
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
	if s.IncludeNoOutboundCIDRs {
		// Only the included ports above are captured.
		return c
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
