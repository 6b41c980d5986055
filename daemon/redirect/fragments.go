package redirect

import "github.com/sluicemesh/sluice/daemon/redirect/nft"

// Rule fragments more than one mode or chain is built from. Each keeps the
// tags it had where it was written inline, so the goldens do not move.

// addRule appends one rule to rules: the shape of almost every rule here.
func addRule(rules *[]nft.Rule, tag string, v nft.Verdict, m ...nft.Match) {
	*rules = append(*rules, nft.Rule{Tag: tag, Matches: m, Verdict: v})
}

// skipExcludedInterfaces returns traffic on an excluded interface (its
// input interface, or its output one when out) before anything captures
// it; no rule when no interface is excluded.
func (b *builder) skipExcludedInterfaces(tag string, out bool) []nft.Rule {
	if !b.has(setExcludeIfaces) {
		return nil
	}
	return []nft.Rule{{Tag: tag, Matches: []nft.Match{nft.IfSetMatch{Out: out, Set: setExcludeIfaces}}, Verdict: nft.Return()}}
}

// proxyOwner is one way a socket is known to be the proxy's: its uid or
// its gid. istio-iptables writes each owner rule once per kind.
type proxyOwner struct {
	name string // "uid" or "gid", in tags
	gid  bool
	id   uint32
}

// match is the owner match, or its negation.
func (o proxyOwner) match(neg bool) nft.OwnerMatch {
	return nft.OwnerMatch{GID: o.gid, Neg: neg, ID: o.id}
}

// proxyOwners are the proxy's uid then gid, in istio-iptables' order.
func (b *builder) proxyOwners() []proxyOwner {
	return []proxyOwner{{"uid", false, b.spec.ProxyUID}, {"gid", true, b.spec.ProxyGID}}
}

// inboundPassRules let the pass-through and excluded inbound ports by,
// before any inbound capture rule.
func (b *builder) inboundPassRules() []nft.Rule {
	var rules []nft.Rule
	for _, r := range []struct{ set, tag string }{
		{setInboundPass, "inbound-pass-ports"},
		{setInboundExclude, "inbound-exclude-ports"},
	} {
		if b.has(r.set) {
			addRule(&rules, r.tag, nft.Return(), nft.PortSetMatch{Proto: nft.TCP, Set: r.set})
		}
	}
	return rules
}

// setRouteMark puts the route mark on a packet, so the policy route
// delivers it locally (TPROXY).
func (b *builder) setRouteMark() nft.MarkSet {
	return nft.MarkSet{From: nft.FromValue, Mask: b.spec.RouteMarkMask, Value: b.spec.RouteMark}
}

// notLoopbackTCP is TCP of family f to anything but loopback: what TPROXY
// takes (and, with no listener, drops).
func notLoopbackTCP(f nft.Family) []nft.Match {
	return []nft.Match{nft.AddrMatch{Neg: true, Addr: loopback(f)}, nft.L4ProtoMatch{Proto: nft.TCP}}
}
