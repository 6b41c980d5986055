package redirect

import (
	"net/netip"

	"github.com/sluicemesh/sluice/daemon/redirect/nft"
)

// The ambient mode: istio-cni's in-pod rules for ztunnel
// (cni/pkg/iptables AppendInpodRules, cni/pkg/nftables), in one inet table
// instead of the mangle, nat and raw tables of two iptables families.
//
// ztunnel runs in the node's pod but opens its listeners inside this pod's
// netns: 15001 (outbound), 15006 (inbound plain text), 15008 (HBONE) and
// 15053 (DNS). Its own sockets carry ZtunnelMark, so nothing it sends is
// captured again. Inbound TCP reaches 15006 by nat REDIRECT, as Istio does:
// with nothing listening there (ztunnel restarting or gone) the connection
// is refused, never delivered to the app. nft's tproxy, which this mode
// used before, falls through to the app when no transparent socket is
// bound. ztunnel connects on to the app from the client's address (a
// transparent socket): the conntrack mark set from ZtunnelMark is restored
// onto the app's replies, and the policy route (RouteMark → RouteTable →
// local) delivers them back to ztunnel instead of out of eth0.

func (b *builder) ambient() {
	b.chains = append(b.chains, b.ambientPreroutingMark(), b.ambientPrerouting(), b.ambientOutputMark(), b.ambientOutput())
	if b.spec.CaptureDNS {
		b.chains = append(b.chains, b.ambientDNSZones()...)
	}
	b.routes = b.policyRoutes()
}

func (b *builder) ztunnelMark(neg bool) nft.MarkMatch {
	return nft.MarkMatch{Neg: neg, Mask: b.spec.ZtunnelMarkMask, Value: b.spec.ZtunnelMark}
}

func (b *builder) connMarked() nft.MarkMatch {
	return nft.MarkMatch{CT: true, Mask: b.spec.RouteMarkMask, Value: b.spec.RouteMark}
}

func (b *builder) probeSource(f nft.Family) netip.Addr {
	if f == nft.IPv6 {
		return b.spec.ProbeSNATIPv6
	}
	return b.spec.ProbeSNATIPv4
}

// ambientPreroutingMark is ISTIO_PRERT in mangle: ztunnel's packets to the
// app (over lo) mark their connection, so the app's replies can be routed
// back to ztunnel's transparent socket.
func (b *builder) ambientPreroutingMark() nft.Chain {
	s := b.spec
	c := nft.MangleChain(chainPreroutingMark, nft.HookPrerouting)
	c.Rules = []nft.Rule{{
		Tag:     "ztunnel-connmark",
		Matches: append(b.familyGuard(), b.ztunnelMark(false)),
		Stmts:   []nft.Stmt{nft.MarkSet{CT: true, From: nft.FromValue, Mask: s.RouteMarkMask, Value: s.RouteMark}},
	}}
	return c
}

// ambientPrerouting is ISTIO_PRERT in nat: virtual interfaces first, then
// the probes, then inbound capture. A nat chain sees only a connection's
// first packet, and none of those the pod sends itself over lo (their NAT
// was decided in output), so no loopback or established rule is needed.
func (b *builder) ambientPrerouting() nft.Chain {
	s := b.spec
	c := nft.NATChain(chainPrerouting, nft.HookPrerouting)
	add := func(tag string, v nft.Verdict, m ...nft.Match) { addRule(&c.Rules, tag, v, m...) }
	// Istio shunts TCP from a VM's interface straight to the outbound
	// listener, and returns (not accepts) so others' chains still run.
	if b.has(setRerouteIfaces) {
		add("reroute-interfaces", nft.RedirectTo(s.OutboundPort), nft.IfSetMatch{Set: setRerouteIfaces}, nft.L4ProtoMatch{Proto: nft.TCP})
		add("reroute-interfaces-return", nft.Return(), nft.IfSetMatch{Set: setRerouteIfaces}, nft.L4ProtoMatch{Proto: nft.TCP})
	}
	if s.BypassInboundCapture {
		return c
	}
	for _, f := range b.families() {
		// The kubelet's probes, SNATed by the host table: not ztunnel's.
		add("probe"+tagSuffix(f), nft.Accept(), nft.AddrMatch{Src: true, Addr: b.probeSource(f)}, nft.L4ProtoMatch{Proto: nft.TCP})
	}
	for _, f := range b.families() {
		// HBONE (15008) goes to ztunnel's listener by its address.
		add("inbound"+tagSuffix(f), nft.RedirectTo(s.InboundPort),
			nft.AddrMatch{Neg: true, Addr: loopback(f)}, nft.PortMatch{Proto: nft.TCP, Neg: true, Port: s.HBONEPort}, b.ztunnelMark(true))
	}
	return c
}

// ambientOutputMark is ISTIO_OUTPUT in mangle: the app's replies on
// connections ztunnel made carry the route mark, so they route to lo.
func (b *builder) ambientOutputMark() nft.Chain {
	c := nft.MangleChain(chainOutputMark, nft.HookOutput)
	c.Rules = []nft.Rule{{
		Tag:     "restore-route-mark-out",
		Matches: append(b.familyGuard(), b.connMarked()),
		Stmts:   []nft.Stmt{nft.MarkSet{From: nft.FromCtMark}},
	}}
	return c
}

// ambientOutput is ISTIO_OUTPUT in nat, in istio-cni's order.
func (b *builder) ambientOutput() nft.Chain {
	s := b.spec
	c := nft.NATChain(chainOutput, nft.HookOutput)
	add := func(tag string, v nft.Verdict, m ...nft.Match) { addRule(&c.Rules, tag, v, m...) }
	notZtunnel := b.ztunnelMark(true)
	for _, f := range b.families() {
		add("probe-reply"+tagSuffix(f), nft.Accept(), nft.AddrMatch{Addr: b.probeSource(f)}, nft.L4ProtoMatch{Proto: nft.TCP})
	}
	if s.CaptureDNS {
		add("dns-udp", nft.RedirectTo(s.DNSPort),
			append(b.familyGuard(), nft.IfMatch{Out: true, Neg: true, Name: LoopbackInterface}, nft.PortMatch{Proto: nft.UDP, Port: dnsPort}, notZtunnel)...)
		for _, f := range b.families() {
			add("dns-tcp"+tagSuffix(f), nft.RedirectTo(s.DNSPort),
				nft.AddrMatch{Neg: true, Addr: loopback(f)}, nft.PortMatch{Proto: nft.TCP, Port: dnsPort}, notZtunnel)
		}
	}
	add("route-marked", nft.Accept(), append(b.familyGuard(), nft.L4ProtoMatch{Proto: nft.TCP}, b.routeMarked())...)
	for _, f := range b.families() {
		// The app calling its own pod address over lo.
		add("loopback"+tagSuffix(f), nft.Accept(), nft.IfMatch{Out: true, Name: LoopbackInterface}, nft.AddrMatch{Neg: true, Addr: loopback(f)})
	}
	for _, f := range b.families() {
		add("outbound"+tagSuffix(f), nft.RedirectTo(s.OutboundPort),
			nft.AddrMatch{Neg: true, Addr: loopback(f)}, nft.L4ProtoMatch{Proto: nft.TCP}, notZtunnel)
	}
	return c
}
