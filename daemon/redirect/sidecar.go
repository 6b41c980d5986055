package redirect

import (
	"net/netip"

	"github.com/sluicemesh/sluice/daemon/redirect/nft"
)

// The sidecar mode: istio-iptables' rules for an Envoy sidecar, chain for
// chain. REDIRECT sends inbound and outbound TCP through nat; TPROXY
// (tproxy.go) takes inbound through mangle instead and keeps outbound on
// REDIRECT, as istio-iptables does.

func (b *builder) sidecar() {
	s := b.spec
	// Envoy's inbound passthrough binds ::6 on lo, which istio-iptables
	// adds in every IPv6 pod (::1 is there already).
	if s.IPv6 && s.InboundPassthroughIPv6 != loopbackV6 {
		b.addrs = []netip.Addr{s.InboundPassthroughIPv6}
	}
	inbound := !s.IncludeNoInboundPorts
	tproxy := inbound && s.Interception == InterceptTProxy
	switch {
	case tproxy:
		b.chains = append(b.chains, b.tproxyPrerouting(), b.tproxyInbound(), b.divert(), b.tproxy())
		if b.has(setRerouteIfaces) {
			// Rerouting is NAT, so it needs the nat prerouting hook
			// TPROXY does not otherwise use.
			b.chains = append(b.chains, b.reroutePrerouting(chainReroute))
		}
	case inbound:
		b.chains = append(b.chains, b.prerouting(), b.inbound())
	case b.has(setRerouteIfaces):
		b.chains = append(b.chains, b.reroutePrerouting(chainPrerouting))
	}
	// The proxy forwarding to its own pod is redirected to the inbound
	// listener from the nat output chain in every interception mode.
	b.chains = append(b.chains, nft.Chain{Name: chainInRedirect, Rules: []nft.Rule{{
		Tag:     "in-redirect",
		Matches: []nft.Match{nft.L4ProtoMatch{Proto: nft.TCP}},
		Verdict: nft.RedirectTo(s.InboundPort),
	}}})
	if tproxy {
		b.chains = append(b.chains, b.tproxyOutputMark())
		b.routes = b.policyRoutes()
	}
	b.chains = append(b.chains, b.output(), b.outbound(), nft.Chain{Name: chainOutRedirect, Rules: []nft.Rule{{
		Tag:     "out-redirect",
		Matches: []nft.Match{nft.L4ProtoMatch{Proto: nft.TCP}},
		Verdict: nft.RedirectTo(s.OutboundPort),
	}}})
	if s.CaptureDNS {
		b.chains = append(b.chains, b.dns())
		b.chains = append(b.chains, b.sidecarDNSZones()...)
	}
}

// rerouteRules are istio-iptables' reroute-virtual-interfaces rules, which
// it inserts at the top of nat PREROUTING: TCP arriving from a VM's
// interface is the VM's outbound traffic, captured (to the include list)
// as the pod's own would be; nothing else from there is inbound.
func (b *builder) rerouteRules() []nft.Rule {
	s := b.spec
	if !b.has(setRerouteIfaces) {
		return nil
	}
	iface := nft.IfSetMatch{Set: setRerouteIfaces}
	var rules []nft.Rule
	switch {
	case s.IncludeNoOutboundCIDRs:
	case len(s.IncludeOutboundCIDRs) == 0:
		rules = append(rules, nft.Rule{Tag: "reroute-interfaces", Matches: []nft.Match{iface}, Verdict: nft.Jump(chainOutRedirect)})
	default:
		for _, x := range []struct {
			set string
			fam nft.Family
		}{{setIncludeV4, nft.IPv4}, {setIncludeV6, nft.IPv6}} {
			if b.has(x.set) {
				rules = append(rules, nft.Rule{Tag: "reroute-interfaces-" + x.set, Matches: []nft.Match{iface, nft.DaddrSetMatch{Family: x.fam, Set: x.set}}, Verdict: nft.Jump(chainOutRedirect)})
			}
		}
	}
	return append(rules, nft.Rule{Tag: "reroute-interfaces-return", Matches: []nft.Match{iface}, Verdict: nft.Return()})
}

// reroutePrerouting is a nat prerouting chain holding only the reroute
// rules, for when no inbound nat chain exists to put them in.
func (b *builder) reroutePrerouting(name string) nft.Chain {
	c := nft.NATChain(name, nft.HookPrerouting)
	c.Rules = b.rerouteRules()
	return c
}

func (b *builder) prerouting() nft.Chain {
	c := nft.NATChain(chainPrerouting, nft.HookPrerouting)
	c.Rules = append(b.rerouteRules(), b.skipExcludedInterfaces("skip-excluded-interfaces-in", false)...)
	c.Rules = append(c.Rules, nft.Rule{
		Tag:     "inbound-tcp",
		Matches: append(b.familyGuard(), nft.L4ProtoMatch{Proto: nft.TCP}),
		Verdict: nft.Jump(chainInbound),
	})
	return c
}

func (b *builder) inbound() nft.Chain {
	c := nft.Chain{Name: chainInbound, Rules: b.inboundPassRules()}
	if b.has(setInboundInclude) {
		addRule(&c.Rules, "inbound-include-ports", nft.Jump(chainInRedirect), nft.PortSetMatch{Proto: nft.TCP, Set: setInboundInclude})
	} else {
		addRule(&c.Rules, "inbound-all-ports", nft.Jump(chainInRedirect), nft.L4ProtoMatch{Proto: nft.TCP})
	}
	return c
}

func (b *builder) output() nft.Chain {
	c := nft.NATChain(chainOutput, nft.HookOutput)
	c.Rules = b.skipExcludedInterfaces("skip-excluded-interfaces-out", true)
	if b.spec.CaptureDNS {
		// UDP never enters the outbound chain (it is TCP's), so DNS over
		// UDP is diverted here, after the excluded ports, which
		// istio-iptables applies to UDP as well as TCP.
		if b.has(setOutboundExclude) {
			c.Rules = append(c.Rules, nft.Rule{
				Tag:     "outbound-exclude-ports-udp",
				Matches: []nft.Match{nft.PortSetMatch{Proto: nft.UDP, Set: setOutboundExclude}},
				Verdict: nft.Return(),
			})
		}
		c.Rules = append(c.Rules, nft.Rule{
			Tag:     "dns-udp",
			Matches: append(b.familyGuard(), nft.PortMatch{Proto: nft.UDP, Port: dnsPort}),
			Verdict: nft.Jump(chainDNS),
		})
	}
	c.Rules = append(c.Rules, nft.Rule{
		Tag:     "outbound-tcp",
		Matches: append(b.familyGuard(), nft.L4ProtoMatch{Proto: nft.TCP}),
		Verdict: nft.Jump(chainOutbound),
	})
	return c
}

// outbound is ISTIO_OUTPUT, in istio-iptables' order; the order is the
// semantics, each rule only sees what the ones before it let through.
func (b *builder) outbound() nft.Chain {
	s := b.spec
	c := nft.Chain{Name: chainOutbound}
	add := func(tag string, v nft.Verdict, m ...nft.Match) { addRule(&c.Rules, tag, v, m...) }
	lo := nft.IfMatch{Out: true, Name: LoopbackInterface}

	// Port exclusions come before the loopback rules below, so the proxy
	// calling its own pod on an excluded port is not sent to inbound.
	if b.has(setOutboundExclude) {
		add("outbound-exclude-ports", nft.Return(), nft.PortSetMatch{Proto: nft.TCP, Set: setOutboundExclude})
	}
	for _, f := range b.families() {
		add("inbound-passthrough"+tagSuffix(f), nft.Return(), lo, nft.AddrMatch{Src: true, Addr: b.passthrough(f)})
	}
	c.Rules = append(c.Rules, b.ownerRules()...)
	if s.CaptureDNS {
		add("dns-tcp", nft.Jump(chainDNS), nft.PortMatch{Proto: nft.TCP, Port: dnsPort})
	}
	for _, f := range b.families() {
		add("localhost"+tagSuffix(f), nft.Return(), nft.AddrMatch{Addr: loopback(f)})
	}
	for _, x := range []struct {
		set string
		fam nft.Family
	}{{setExcludeV4, nft.IPv4}, {setExcludeV6, nft.IPv6}} {
		if b.has(x.set) {
			add(x.set, nft.Return(), nft.DaddrSetMatch{Family: x.fam, Set: x.set})
		}
	}
	if b.has(setOutboundInclude) {
		add("outbound-include-ports", nft.Jump(chainOutRedirect), nft.PortSetMatch{Proto: nft.TCP, Set: setOutboundInclude})
	}
	if s.IncludeNoOutboundCIDRs {
		// Only the included ports above are captured.
		return c
	}
	if len(s.IncludeOutboundCIDRs) == 0 {
		add("outbound-all", nft.Jump(chainOutRedirect))
		return c
	}
	for _, x := range []struct {
		set string
		fam nft.Family
	}{{setIncludeV4, nft.IPv4}, {setIncludeV6, nft.IPv6}} {
		if b.has(x.set) {
			add(x.set, nft.Jump(chainOutRedirect), nft.DaddrSetMatch{Family: x.fam, Set: x.set})
		}
	}
	return c
}

// ownerRules are ISTIO_OUTPUT's rules by socket owner, uid then gid: the
// proxy forwarding to its own pod, the app calling itself over lo, and the
// proxy's own traffic.
func (b *builder) ownerRules() []nft.Rule {
	s := b.spec
	var rules []nft.Rule
	add := func(tag string, v nft.Verdict, m ...nft.Match) { addRule(&rules, tag, v, m...) }
	lo := nft.IfMatch{Out: true, Name: LoopbackInterface}
	for _, owner := range b.proxyOwners() {
		proxy := owner.match(false)
		// The app called itself through a service VIP and the proxy is
		// now forwarding that over loopback: it must enter as inbound.
		// HBONE to ourselves is the proxy's own tunnel and is left alone;
		// with DNS capture so is the agent's TCP DNS to a resolver on
		// the pod's address (istio-iptables does this for the uid only).
		for _, f := range b.families() {
			m := []nft.Match{lo, nft.AddrMatch{Neg: true, Addr: loopback(f)}, nft.PortMatch{Proto: nft.TCP, Neg: true, Port: s.HBONEPort}}
			if s.CaptureDNS && !owner.gid {
				m = append(m, nft.PortMatch{Proto: nft.TCP, Neg: true, Port: dnsPort})
			}
			add("proxy-"+owner.name+"-to-self"+tagSuffix(f), nft.Jump(chainInRedirect), append(m, proxy)...)
		}
		// The app calling itself by its endpoint address over loopback,
		// unless the include list names loopback: then it is captured.
		// With DNS capture, TCP DNS to a resolver on lo still is.
		switch {
		case includesLoopback(s.IncludeOutboundCIDRs):
		case s.CaptureDNS:
			add("app-"+owner.name+"-loopback", nft.Return(), lo, nft.PortMatch{Proto: nft.TCP, Neg: true, Port: dnsPort}, owner.match(true))
		default:
			add("app-"+owner.name+"-loopback", nft.Return(), lo, owner.match(true))
		}
		// The proxy's own outbound traffic: capturing it would loop.
		add("proxy-"+owner.name, nft.Return(), proxy)
	}
	return rules
}

// dns sends DNS to the proxy's DNS listener unless the proxy itself is
// the one asking (it resolves upstream for everyone else).
func (b *builder) dns() nft.Chain {
	c := nft.Chain{Name: chainDNS}
	for _, owner := range b.proxyOwners() {
		addRule(&c.Rules, "dns-proxy-"+owner.name, nft.Return(), owner.match(false))
	}
	addRule(&c.Rules, "dns-redirect-tcp", nft.RedirectTo(b.spec.DNSPort), nft.L4ProtoMatch{Proto: nft.TCP})
	addRule(&c.Rules, "dns-redirect-udp", nft.RedirectTo(b.spec.DNSPort), nft.L4ProtoMatch{Proto: nft.UDP})
	return c
}

// includesLoopback is istio-iptables' HasLoopBackIP: a prefix of the
// include list starts at a loopback address.
func includesLoopback(include []netip.Prefix) bool {
	for _, p := range include {
		if p.Addr().IsLoopback() {
			return true
		}
	}
	return false
}
