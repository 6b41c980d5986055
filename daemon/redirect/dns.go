package redirect

import "github.com/sluicemesh/sluice/daemon/redirect/nft"

// DNS conntrack zones (istio/istio#33469). The proxy answers a redirected
// query and asks upstream itself, often from the same source port the app
// used: in one conntrack zone the upstream query has the app's original
// tuple, matches the app's NATed connection and is sent back to the DNS
// listener. Istio's raw-table CT --zone rules keep proxy↔upstream in zone 1
// and app↔proxy in zone 2 (ambient: ztunnel's upstream traffic in zone 1).
//
// A packet's zone is chosen once, by the first zone statement it meets
// (the kernel ignores later ones once a template is attached, as it does
// for iptables' CT target); the proxy's rules accept after setting it so
// that does not have to be relied on.

const (
	zoneUpstream = 1 // the proxy and the upstream resolvers
	zoneApp      = 2 // the app and the proxy's DNS listener
)

// sidecarDNSZones are istio-iptables' raw ISTIO_OUTPUT_DNS and raw
// ISTIO_INBOUND rules with every DNS server captured.
func (b *builder) sidecarDNSZones() []nft.Chain {
	s := b.spec
	out := nft.RawChain(chainRawOutput, nft.HookOutput)
	zone := func(c *nft.Chain, tag string, z uint16, v nft.Verdict, m ...nft.Match) {
		c.Rules = append(c.Rules, nft.Rule{Tag: tag, Matches: append(b.familyGuard(), m...), Stmts: []nft.Stmt{nft.CTZoneSet{Zone: z}}, Verdict: v})
	}
	for _, owner := range b.proxyOwners() {
		proxy := owner.match(false)
		// The proxy asking upstream.
		zone(&out, "dns-zone-proxy-"+owner.name+"-upstream", zoneUpstream, nft.Accept(), nft.PortMatch{Proto: nft.UDP, Port: dnsPort}, proxy)
		// The proxy answering the app from its DNS listener.
		zone(&out, "dns-zone-proxy-"+owner.name+"-answer", zoneApp, nft.Accept(), nft.PortMatch{Proto: nft.UDP, Src: true, Port: s.DNSPort}, proxy)
	}
	// The app asking, before its query is redirected to the listener.
	zone(&out, "dns-zone-app", zoneApp, nft.Verdict{}, nft.PortMatch{Proto: nft.UDP, Port: dnsPort})
	in := nft.RawChain(chainRawPrerouting, nft.HookPrerouting)
	// Upstream's answers, to the proxy's zone-1 connection.
	zone(&in, "dns-zone-upstream-answer", zoneUpstream, nft.Verdict{}, nft.PortMatch{Proto: nft.UDP, Src: true, Port: dnsPort})
	return []nft.Chain{in, out}
}

// ambientDNSZones are istio-cni's in-pod raw rules: ztunnel's upstream
// queries and their answers in zone 1, everything else left in zone 0.
func (b *builder) ambientDNSZones() []nft.Chain {
	in := nft.RawChain(chainRawPrerouting, nft.HookPrerouting)
	in.Rules = []nft.Rule{{
		Tag:     "dns-zone-upstream-answer",
		Matches: append(b.familyGuard(), nft.PortMatch{Proto: nft.UDP, Src: true, Port: dnsPort}, b.ztunnelMark(true)),
		Stmts:   []nft.Stmt{nft.CTZoneSet{Zone: zoneUpstream}},
	}}
	out := nft.RawChain(chainRawOutput, nft.HookOutput)
	out.Rules = []nft.Rule{{
		Tag:     "dns-zone-ztunnel-upstream",
		Matches: append(b.familyGuard(), nft.PortMatch{Proto: nft.UDP, Port: dnsPort}, b.ztunnelMark(false)),
		Stmts:   []nft.Stmt{nft.CTZoneSet{Zone: zoneUpstream}},
	}}
	return []nft.Chain{in, out}
}
