package redirect

import "github.com/sluicemesh/sluice/daemon/redirect/nft"

// Sidecar TPROXY interception, after istio-iptables with
// --inbound-interception-mode TPROXY. Inbound TCP keeps its destination and
// is handed to Envoy's transparent 15006 socket by the mangle prerouting
// chain; the route mark (1337) sends it, and Envoy's replies to the app's
// original-source connections, through the local policy route (table 133).

// loopbackMark is istio-iptables' "outbound mark" (the route mark + 1): the
// proxy's own traffic to its pod over lo carries it, so inbound lets that
// (and only that) loopback traffic through to the proxy.
func (b *builder) loopbackMark() uint32 {
	return (b.spec.RouteMark + 1) & b.spec.RouteMarkMask
}

func (b *builder) routeMarked() nft.MarkMatch {
	return nft.MarkMatch{Mask: b.spec.RouteMarkMask, Value: b.spec.RouteMark}
}

func (b *builder) tproxyPrerouting() nft.Chain {
	c := nft.MangleChain(chainPrerouting, nft.HookPrerouting)
	c.Rules = b.skipExcludedInterfaces("skip-excluded-interfaces-in", false)
	if b.has(setRerouteIfaces) {
		// A VM's traffic is outbound, for the nat reroute chain; Istio
		// would TPROXY it to the inbound listener here.
		c.Rules = append(c.Rules, nft.Rule{
			Tag:     "skip-reroute-interfaces-in",
			Matches: []nft.Match{nft.IfSetMatch{Set: setRerouteIfaces}},
			Verdict: nft.Return(),
		})
	}
	c.Rules = append(c.Rules,
		nft.Rule{Tag: "inbound-tcp", Matches: append(b.familyGuard(), nft.L4ProtoMatch{Proto: nft.TCP}), Verdict: nft.Jump(chainInbound)},
		// Envoy's original_src listener filter marks its connections to
		// the app; the conntrack mark brings the app's replies back.
		nft.Rule{
			Tag:     "save-route-mark",
			Matches: append(b.familyGuard(), nft.L4ProtoMatch{Proto: nft.TCP}, b.routeMarked()),
			Stmts:   []nft.Stmt{nft.MarkSet{CT: true, From: nft.FromMetaMark}},
		},
	)
	return c
}

func (b *builder) tproxyInbound() nft.Chain {
	c := nft.Chain{Name: chainInbound}
	add := func(tag string, v nft.Verdict, m ...nft.Match) { addRule(&c.Rules, tag, v, m...) }
	lo := nft.IfMatch{Name: LoopbackInterface}
	// Already diverted or marked by Envoy: never twice.
	add("route-marked", nft.Return(), nft.L4ProtoMatch{Proto: nft.TCP}, b.routeMarked())
	for _, f := range b.families() {
		add("lo-passthrough"+tagSuffix(f), nft.Return(), lo, nft.AddrMatch{Src: true, Addr: b.passthrough(f)}, nft.L4ProtoMatch{Proto: nft.TCP})
	}
	// Over lo only the proxy's own calls to its pod are inbound.
	add("lo-not-proxy-to-self", nft.Return(), lo, nft.L4ProtoMatch{Proto: nft.TCP}, nft.MarkMatch{Neg: true, Mask: b.spec.RouteMarkMask, Value: b.loopbackMark()})
	c.Rules = append(c.Rules, b.inboundPassRules()...)
	// A packet of a connection already handed over finds its socket by
	// the local route; a new one goes to the transparent listener.
	ports := []nft.Match{nft.L4ProtoMatch{Proto: nft.TCP}}
	tag := "inbound-all-ports"
	if b.has(setInboundInclude) {
		ports, tag = []nft.Match{nft.PortSetMatch{Proto: nft.TCP, Set: setInboundInclude}}, "inbound-include-ports"
	}
	add(tag+"-established", nft.Jump(chainDivert), append(ports, nft.EstablishedMatch{})...)
	add(tag, nft.Jump(chainTProxy), ports...)
	return c
}

func (b *builder) divert() nft.Chain {
	return nft.Chain{Name: chainDivert, Rules: []nft.Rule{{
		Tag:     "divert",
		Stmts:   []nft.Stmt{b.setRouteMark()},
		Verdict: nft.Accept(),
	}}}
}

func (b *builder) tproxy() nft.Chain {
	s := b.spec
	c := nft.Chain{Name: chainTProxy}
	for _, f := range b.families() {
		c.Rules = append(c.Rules, nft.Rule{
			Tag:     "tproxy" + tagSuffix(f),
			Matches: notLoopbackTCP(f),
			Stmts:   []nft.Stmt{nft.TProxyStmt{Family: f, Port: s.InboundPort}, b.setRouteMark()},
			Verdict: nft.Accept(),
		})
	}
	// nft's tproxy, unlike iptables' TPROXY target, lets the packet go on
	// when no transparent socket listens on the port: without this the
	// SYN would reach the app uncaptured whenever the proxy is down.
	for _, f := range b.families() {
		addRule(&c.Rules, "tproxy-no-listener"+tagSuffix(f), nft.Drop(), notLoopbackTCP(f)...)
	}
	return c
}

// tproxyOutputMark is istio-iptables' mangle OUTPUT in TPROXY mode.
func (b *builder) tproxyOutputMark() nft.Chain {
	s := b.spec
	c := nft.MangleChain(chainOutputMark, nft.HookOutput)
	lo := nft.IfMatch{Out: true, Name: LoopbackInterface}
	c.Rules = b.skipExcludedInterfaces("skip-excluded-interfaces-mark", true)
	addRule(&c.Rules, "lo-route-marked", nft.Return(), lo, nft.L4ProtoMatch{Proto: nft.TCP}, b.routeMarked())
	for _, owner := range b.proxyOwners() {
		for _, f := range b.families() {
			c.Rules = append(c.Rules, nft.Rule{
				Tag:     "proxy-" + owner.name + "-to-self-mark" + tagSuffix(f),
				Matches: append([]nft.Match{lo}, append(notLoopbackTCP(f), owner.match(false))...),
				Stmts:   []nft.Stmt{nft.MarkSet{From: nft.FromValue, Mask: s.RouteMarkMask, Value: b.loopbackMark()}},
			})
		}
	}
	c.Rules = append(c.Rules, nft.Rule{
		Tag:     "restore-route-mark",
		Matches: append(b.familyGuard(), nft.L4ProtoMatch{Proto: nft.TCP}, nft.MarkMatch{CT: true, Mask: s.RouteMarkMask, Value: s.RouteMark}),
		Stmts:   []nft.Stmt{nft.MarkSet{From: nft.FromCtMark}},
	})
	return c
}
