package redirect

import (
	"net/netip"

	"github.com/sluicemesh/sluice/daemon/redirect/nft"
)

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
	b.chains = []nft.Chain{b.ambientPrerouting(), b.ambientOutputMark(), b.ambientOutput()}
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

// ambientPrerouting is ISTIO_PRERT in mangle: marks first, then what is
// never captured, then inbound capture.
func (b *builder) ambientPrerouting() nft.Chain {
	s := b.spec
	c := nft.MangleChain(chainPrerouting, nft.HookPrerouting)
	add := func(tag string, st []nft.Stmt, v nft.Verdict, m ...nft.Match) {
		c.Rules = append(c.Rules, nft.Rule{Tag: tag, Matches: m, Stmts: st, Verdict: v})
	}
	guard := b.familyGuard()
	// ztunnel's packets to the app (over lo) mark their connection.
	add("ztunnel-connmark", []nft.Stmt{nft.MarkSet{CT: true, From: nft.FromValue, Mask: s.RouteMarkMask, Value: s.RouteMark}}, nft.Verdict{},
		append(guard, b.ztunnelMark(false))...)
	// Packets of those connections carry the route mark again.
	add("restore-route-mark", []nft.Stmt{nft.MarkSet{From: nft.FromCtMark}}, nft.Verdict{}, append(guard, b.connMarked())...)
	if s.BypassInboundCapture {
		return c
	}
	for _, f := range b.families() {
		// The kubelet's probes, SNATed by the host table: not ztunnel's.
		add("probe"+tagSuffix(f), nil, nft.Accept(), nft.AddrMatch{Src: true, Addr: b.probeSource(f)}, nft.L4ProtoMatch{Proto: nft.TCP})
	}
	// Traffic within the pod, and ztunnel's own to the app, is not inbound.
	add("loopback", nil, nft.Accept(), append(guard, nft.IfMatch{Name: loopbackInterface}, nft.L4ProtoMatch{Proto: nft.TCP})...)
	// Once handed to ztunnel, a connection finds its socket by the
	// destination, which is local: only its first packet needs TPROXY.
	add("established", nil, nft.Accept(), append(guard, nft.L4ProtoMatch{Proto: nft.TCP}, nft.EstablishedMatch{})...)
	for _, f := range b.families() {
		// HBONE (15008) goes to ztunnel's listener by its address.
		c.Rules = append(c.Rules, nft.Rule{
			Tag: "inbound-tproxy" + tagSuffix(f),
			Matches: []nft.Match{
				nft.AddrMatch{Neg: true, Addr: loopback(f)},
				nft.PortMatch{Proto: nft.TCP, Neg: true, Port: s.HBONEPort},
				b.ztunnelMark(true),
			},
			Stmts: []nft.Stmt{
				nft.TProxyStmt{Family: f, Port: s.InboundPort},
				nft.MarkSet{From: nft.FromValue, Mask: s.RouteMarkMask, Value: s.RouteMark},
			},
			Verdict: nft.Accept(),
		})
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
	add := func(tag string, v nft.Verdict, m ...nft.Match) {
		c.Rules = append(c.Rules, nft.Rule{Tag: tag, Matches: m, Verdict: v})
	}
	notZtunnel := b.ztunnelMark(true)
	for _, f := range b.families() {
		add("probe-reply"+tagSuffix(f), nft.Accept(), nft.AddrMatch{Addr: b.probeSource(f)}, nft.L4ProtoMatch{Proto: nft.TCP})
	}
	if s.CaptureDNS {
		add("dns-udp", nft.RedirectTo(s.DNSPort),
			append(b.familyGuard(), nft.IfMatch{Out: true, Neg: true, Name: loopbackInterface}, nft.PortMatch{Proto: nft.UDP, Port: dnsPort}, notZtunnel)...)
		for _, f := range b.families() {
			add("dns-tcp"+tagSuffix(f), nft.RedirectTo(s.DNSPort),
				nft.AddrMatch{Neg: true, Addr: loopback(f)}, nft.PortMatch{Proto: nft.TCP, Port: dnsPort}, notZtunnel)
		}
	}
	add("route-marked", nft.Accept(), append(b.familyGuard(), nft.L4ProtoMatch{Proto: nft.TCP}, b.routeMarked())...)
	for _, f := range b.families() {
		// The app calling its own pod address over lo.
		add("loopback"+tagSuffix(f), nft.Accept(), nft.IfMatch{Out: true, Name: loopbackInterface}, nft.AddrMatch{Neg: true, Addr: loopback(f)})
	}
	for _, f := range b.families() {
		add("outbound"+tagSuffix(f), nft.RedirectTo(s.OutboundPort),
			nft.AddrMatch{Neg: true, Addr: loopback(f)}, nft.L4ProtoMatch{Proto: nft.TCP}, notZtunnel)
	}
	return c
}
