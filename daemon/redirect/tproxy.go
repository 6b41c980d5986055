package redirect

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

func (b *builder) routeMarked() markMatch {
	return markMatch{mask: b.spec.RouteMarkMask, value: b.spec.RouteMark}
}

func (b *builder) tproxyPrerouting() chain {
	c := mangleChain(chainPrerouting, hookPrerouting)
	if b.has(setExcludeIfaces) {
		c.rules = append(c.rules, rule{
			tag:     "skip-excluded-interfaces-in",
			matches: []match{ifSetMatch{out: false, set: setExcludeIfaces}},
			verdict: ret(),
		})
	}
	c.rules = append(c.rules,
		rule{tag: "inbound-tcp", matches: append(b.familyGuard(), l4protoMatch{tcp}), verdict: jump(chainInbound)},
		// Envoy's original_src listener filter marks its connections to
		// the app; the conntrack mark brings the app's replies back.
		rule{
			tag:     "save-route-mark",
			matches: append(b.familyGuard(), l4protoMatch{tcp}, b.routeMarked()),
			stmts:   []stmt{markSet{ct: true, from: fromMetaMark}},
		},
	)
	return c
}

func (b *builder) tproxyInbound() chain {
	c := chain{name: chainInbound}
	add := func(tag string, v verdict, m ...match) {
		c.rules = append(c.rules, rule{tag: tag, matches: m, verdict: v})
	}
	lo := ifMatch{name: loopbackInterface}
	// Already diverted or marked by Envoy: never twice.
	add("route-marked", ret(), l4protoMatch{tcp}, b.routeMarked())
	for _, f := range b.families() {
		add("lo-passthrough"+f.tagSuffix(), ret(), lo, addrMatch{src: true, addr: b.passthrough(f)}, l4protoMatch{tcp})
	}
	// Over lo only the proxy's own calls to its pod are inbound.
	add("lo-not-proxy-to-self", ret(), lo, l4protoMatch{tcp}, markMatch{neg: true, mask: b.spec.RouteMarkMask, value: b.loopbackMark()})
	for _, r := range []struct{ set, tag string }{
		{setInboundPass, "inbound-pass-ports"},
		{setInboundExclude, "inbound-exclude-ports"},
	} {
		if b.has(r.set) {
			add(r.tag, ret(), portSetMatch{tcp, r.set})
		}
	}
	// A packet of a connection already handed over finds its socket by
	// the local route; a new one goes to the transparent listener.
	ports := []match{l4protoMatch{tcp}}
	tag := "inbound-all-ports"
	if b.has(setInboundInclude) {
		ports, tag = []match{portSetMatch{tcp, setInboundInclude}}, "inbound-include-ports"
	}
	add(tag+"-established", jump(chainDivert), append(ports, establishedMatch{})...)
	add(tag, jump(chainTProxy), ports...)
	return c
}

func (b *builder) divert() chain {
	s := b.spec
	return chain{name: chainDivert, rules: []rule{{
		tag:     "divert",
		stmts:   []stmt{markSet{from: fromValue, mask: s.RouteMarkMask, value: s.RouteMark}},
		verdict: accept(),
	}}}
}

func (b *builder) tproxy() chain {
	s := b.spec
	c := chain{name: chainTProxy}
	for _, f := range b.families() {
		c.rules = append(c.rules, rule{
			tag:     "tproxy" + f.tagSuffix(),
			matches: []match{addrMatch{neg: true, addr: f.loopback()}, l4protoMatch{tcp}},
			stmts: []stmt{
				tproxyStmt{fam: f, port: s.InboundPort},
				markSet{from: fromValue, mask: s.RouteMarkMask, value: s.RouteMark},
			},
			verdict: accept(),
		})
	}
	return c
}

// tproxyOutputMark is istio-iptables' mangle OUTPUT in TPROXY mode.
func (b *builder) tproxyOutputMark() chain {
	s := b.spec
	c := mangleChain(chainOutputMark, hookOutput)
	lo := ifMatch{out: true, name: loopbackInterface}
	if b.has(setExcludeIfaces) {
		c.rules = append(c.rules, rule{
			tag:     "skip-excluded-interfaces-mark",
			matches: []match{ifSetMatch{out: true, set: setExcludeIfaces}},
			verdict: ret(),
		})
	}
	c.rules = append(c.rules, rule{tag: "lo-route-marked", matches: []match{lo, l4protoMatch{tcp}, b.routeMarked()}, verdict: ret()})
	for _, owner := range []struct {
		name string
		gid  bool
		id   uint32
	}{{"uid", false, s.ProxyUID}, {"gid", true, s.ProxyGID}} {
		for _, f := range b.families() {
			c.rules = append(c.rules, rule{
				tag:     "proxy-" + owner.name + "-to-self-mark" + f.tagSuffix(),
				matches: []match{lo, addrMatch{neg: true, addr: f.loopback()}, l4protoMatch{tcp}, ownerMatch{gid: owner.gid, id: owner.id}},
				stmts:   []stmt{markSet{from: fromValue, mask: s.RouteMarkMask, value: b.loopbackMark()}},
			})
		}
	}
	c.rules = append(c.rules, rule{
		tag:     "restore-route-mark",
		matches: append(b.familyGuard(), l4protoMatch{tcp}, markMatch{ct: true, mask: s.RouteMarkMask, value: s.RouteMark}),
		stmts:   []stmt{markSet{from: fromCtMark}},
	})
	return c
}
