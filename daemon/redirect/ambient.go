package redirect

import "net/netip"

// The ambient mode: istio-cni's in-pod rules for ztunnel
// (cni/pkg/iptables AppendInpodRules), in one inet table instead of the
// mangle and nat tables of two iptables families.
//
// ztunnel runs in the node's pod but opens its listeners inside this pod's
// netns: 15001 (outbound), 15006 (inbound plain text), 15008 (HBONE) and
// 15053 (DNS). Its own sockets carry ZtunnelMark, so nothing it sends is
// captured again. Inbound TCP reaches 15006 by TPROXY with RouteMark, and
// ztunnel connects on to the app from the client's address (a transparent
// socket): the conntrack mark set from ZtunnelMark is restored onto the
// app's replies, and the policy route (RouteMark → RouteTable → local)
// delivers them back to ztunnel instead of out of eth0.

func (b *builder) ambient() {
	b.chains = []chain{b.ambientPrerouting(), b.ambientOutputMark(), b.ambientOutput()}
	b.routes = b.policyRoutes()
}

func (b *builder) ztunnelMark(neg bool) markMatch {
	return markMatch{neg: neg, mask: b.spec.ZtunnelMarkMask, value: b.spec.ZtunnelMark}
}

func (b *builder) connMarked() markMatch {
	return markMatch{ct: true, mask: b.spec.RouteMarkMask, value: b.spec.RouteMark}
}

func (b *builder) probeSource(f family) netip.Addr {
	if f == ipv6 {
		return b.spec.ProbeSNATIPv6
	}
	return b.spec.ProbeSNATIPv4
}

// ambientPrerouting is ISTIO_PRERT in mangle: marks first, then what is
// never captured, then inbound capture.
func (b *builder) ambientPrerouting() chain {
	s := b.spec
	c := mangleChain(chainPrerouting, hookPrerouting)
	add := func(tag string, st []stmt, v verdict, m ...match) {
		c.rules = append(c.rules, rule{tag: tag, matches: m, stmts: st, verdict: v})
	}
	guard := b.familyGuard()
	// ztunnel's packets to the app (over lo) mark their connection.
	add("ztunnel-connmark", []stmt{markSet{ct: true, from: fromValue, mask: s.RouteMarkMask, value: s.RouteMark}}, verdict{},
		append(guard, b.ztunnelMark(false))...)
	// Packets of those connections carry the route mark again.
	add("restore-route-mark", []stmt{markSet{from: fromCtMark}}, verdict{}, append(guard, b.connMarked())...)
	if s.BypassInboundCapture {
		return c
	}
	for _, f := range b.families() {
		// The kubelet's probes, SNATed by the host table: not ztunnel's.
		add("probe"+f.tagSuffix(), nil, accept(), addrMatch{src: true, addr: b.probeSource(f)}, l4protoMatch{tcp})
	}
	// Traffic within the pod, and ztunnel's own to the app, is not inbound.
	add("loopback", nil, accept(), append(guard, ifMatch{name: loopbackInterface}, l4protoMatch{tcp})...)
	// Once handed to ztunnel, a connection finds its socket by the
	// destination, which is local: only its first packet needs TPROXY.
	add("established", nil, accept(), append(guard, l4protoMatch{tcp}, establishedMatch{})...)
	for _, f := range b.families() {
		// HBONE (15008) goes to ztunnel's listener by its address.
		c.rules = append(c.rules, rule{
			tag: "inbound-tproxy" + f.tagSuffix(),
			matches: []match{
				addrMatch{neg: true, addr: f.loopback()},
				portMatch{proto: tcp, neg: true, port: s.HBONEPort},
				b.ztunnelMark(true),
			},
			stmts: []stmt{
				tproxyStmt{fam: f, port: s.InboundPort},
				markSet{from: fromValue, mask: s.RouteMarkMask, value: s.RouteMark},
			},
			verdict: accept(),
		})
	}
	return c
}

// ambientOutputMark is ISTIO_OUTPUT in mangle: the app's replies on
// connections ztunnel made carry the route mark, so they route to lo.
func (b *builder) ambientOutputMark() chain {
	c := mangleChain(chainOutputMark, hookOutput)
	c.rules = []rule{{
		tag:     "restore-route-mark-out",
		matches: append(b.familyGuard(), b.connMarked()),
		stmts:   []stmt{markSet{from: fromCtMark}},
	}}
	return c
}

// ambientOutput is ISTIO_OUTPUT in nat, in istio-cni's order.
func (b *builder) ambientOutput() chain {
	s := b.spec
	c := natChain(chainOutput, hookOutput)
	add := func(tag string, v verdict, m ...match) {
		c.rules = append(c.rules, rule{tag: tag, matches: m, verdict: v})
	}
	notZtunnel := b.ztunnelMark(true)
	for _, f := range b.families() {
		add("probe-reply"+f.tagSuffix(), accept(), addrMatch{addr: b.probeSource(f)}, l4protoMatch{tcp})
	}
	if s.CaptureDNS {
		add("dns-udp", redirectTo(s.DNSPort),
			append(b.familyGuard(), ifMatch{out: true, neg: true, name: loopbackInterface}, portMatch{proto: udp, port: dnsPort}, notZtunnel)...)
		for _, f := range b.families() {
			add("dns-tcp"+f.tagSuffix(), redirectTo(s.DNSPort),
				addrMatch{neg: true, addr: f.loopback()}, portMatch{proto: tcp, port: dnsPort}, notZtunnel)
		}
	}
	add("route-marked", accept(), append(b.familyGuard(), l4protoMatch{tcp}, b.routeMarked())...)
	for _, f := range b.families() {
		// The app calling its own pod address over lo.
		add("loopback"+f.tagSuffix(), accept(), ifMatch{out: true, name: loopbackInterface}, addrMatch{neg: true, addr: f.loopback()})
	}
	for _, f := range b.families() {
		add("outbound"+f.tagSuffix(), redirectTo(s.OutboundPort),
			addrMatch{neg: true, addr: f.loopback()}, l4protoMatch{tcp}, notZtunnel)
	}
	return c
}
