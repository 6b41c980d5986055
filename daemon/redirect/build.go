package redirect

import (
	"net/netip"
	"slices"

	"github.com/sluicemesh/sluice/daemon/redirect/nft"
)

// Chain names, the nftables counterparts of istio-iptables' chains.
const (
	chainPrerouting     = "prerouting"      // nat PREROUTING (mangle with TPROXY)
	chainPreroutingMark = "prerouting-mark" // mangle PREROUTING (ambient)
	chainInvalid        = "invalid"         // mangle PREROUTING's INVALID_DROP
	chainRawPrerouting  = "raw-prerouting"  // raw PREROUTING (DNS conntrack zones)
	chainReroute        = "reroute"         // nat PREROUTING for reroute interfaces (TPROXY)
	chainRawOutput      = "raw-output"      // raw OUTPUT (DNS conntrack zones)
	chainInbound        = "inbound"         // ISTIO_INBOUND
	chainDivert         = "divert"          // ISTIO_DIVERT (TPROXY)
	chainTProxy         = "tproxy"          // ISTIO_TPROXY (TPROXY)
	chainInRedirect     = "in-redirect"     // ISTIO_IN_REDIRECT
	chainOutputMark     = "output-mark"     // mangle OUTPUT (TPROXY and ambient)
	chainOutput         = "output"          // nat OUTPUT
	chainOutbound       = "outbound"        // ISTIO_OUTPUT
	chainOutRedirect    = "out-redirect"    // ISTIO_REDIRECT
	chainDNS            = "dns"             // the DNS rules istio-iptables keeps in OUTPUT
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
	setRerouteIfaces   = "reroute-interfaces"
)

const dnsPort = 53

// LoopbackInterface is the pod's loopback: the policy routes' device, and
// where ::6 goes.
const LoopbackInterface = "lo"

var (
	loopbackV4 = netip.MustParseAddr("127.0.0.1")
	loopbackV6 = netip.IPv6Loopback()
)

// Build turns a Spec into the ruleset for table inet sluice (and the policy
// routes beside it, for TPROXY and ambient). It is pure: no kernel, no I/O,
// the same Spec always gives the same Ruleset (and Hash). A Spec equal to
// one built before gets that Ruleset back (buildcache.go).
func Build(s Spec) (*Ruleset, error) {
	if r := built.get(s); r != nil {
		return r, nil
	}
	r, err := build(s)
	if err != nil {
		return nil, err
	}
	built.put(s, r)
	return r, nil
}

func build(s Spec) (*Ruleset, error) {
	if err := validate(s); err != nil {
		return nil, err
	}
	b := &builder{spec: s}
	b.addSets()
	if s.DropInvalid {
		b.chains = append(b.chains, b.dropInvalid())
	}
	switch s.Mode {
	case ModeAmbient:
		b.ambient()
	default:
		b.sidecar()
	}
	return b.ruleset(TableName), nil
}

type builder struct {
	spec   Spec
	sets   []nft.Set
	chains []nft.Chain
	routes []PolicyRoute
	addrs  []netip.Addr
}

func (b *builder) ruleset(table string) *Ruleset {
	t := &nft.Table{Name: table, Sets: b.sets, Chains: b.chains}
	return &Ruleset{
		table:   t,
		routes:  b.routes,
		loAddrs: b.addrs,
		ipv4:    b.spec.IPv4,
		text:    t.Render() + renderRoutes(b.routes, b.addrs),
	}
}

// policyRoutes are the spec's fwmark rule and local route, per family.
func (b *builder) policyRoutes() []PolicyRoute {
	var out []PolicyRoute
	for _, f := range b.families() {
		s := b.spec
		out = append(out, PolicyRoute{Family: f, Mark: s.RouteMark, Mask: s.RouteMarkMask, Table: s.RouteTable, Priority: s.RoutePriority})
	}
	return out
}

// addSets declares every non-empty list as a named set; the chains then
// reference a set only when has says it exists. Without inbound capture
// the inbound lists would be sets nothing refers to, so they are left out.
func (b *builder) addSets() {
	s := b.spec
	ports := func(name string, p []uint16) {
		if len(p) > 0 {
			b.sets = append(b.sets, nft.Set{Name: name, Type: nft.SetPorts, Ports: SortedPorts(slices.Clone(p))})
		}
	}
	cidrs := func(name string, fam nft.Family, all []netip.Prefix) {
		if p := normalisePrefixes(fam, all); len(p) > 0 {
			typ := nft.SetIPv4
			if fam == nft.IPv6 {
				typ = nft.SetIPv6
			}
			b.sets = append(b.sets, nft.Set{Name: name, Type: typ, Prefixes: p})
		}
	}
	if !s.IncludeNoInboundPorts {
		ports(setInboundPass, s.InboundPassPorts)
		ports(setInboundInclude, s.IncludeInboundPorts)
		ports(setInboundExclude, s.ExcludeInboundPorts)
	}
	ports(setOutboundInclude, s.IncludeOutboundPorts)
	ports(setOutboundExclude, s.ExcludeOutboundPorts)
	cidrs(setIncludeV4, nft.IPv4, s.IncludeOutboundCIDRs)
	cidrs(setIncludeV6, nft.IPv6, s.IncludeOutboundCIDRs)
	cidrs(setExcludeV4, nft.IPv4, s.ExcludeOutboundCIDRs)
	cidrs(setExcludeV6, nft.IPv6, s.ExcludeOutboundCIDRs)
	ifnames := func(name string, all []string) {
		if len(all) > 0 {
			names := slices.Clone(all)
			slices.Sort(names)
			b.sets = append(b.sets, nft.Set{Name: name, Type: nft.SetIfnames, Ifnames: slices.Compact(names)})
		}
	}
	ifnames(setExcludeIfaces, s.ExcludeInterfaces)
	ifnames(setRerouteIfaces, s.RerouteInterfaces)
}

func (b *builder) has(name string) bool {
	return slices.ContainsFunc(b.sets, func(s nft.Set) bool { return s.Name == name })
}

// families are the address families captured.
func (b *builder) families() []nft.Family {
	var f []nft.Family
	if b.spec.IPv4 {
		f = append(f, nft.IPv4)
	}
	if b.spec.IPv6 {
		f = append(f, nft.IPv6)
	}
	return f
}

// familyGuard confines an entry rule to the one captured family; with both
// families on, the inet table sees both and no guard is needed.
func (b *builder) familyGuard() []nft.Match {
	if f := b.families(); len(f) == 1 {
		return []nft.Match{nft.NFProtoMatch{Family: f[0]}}
	}
	return nil
}

func (b *builder) passthrough(f nft.Family) netip.Addr {
	if f == nft.IPv6 {
		return b.spec.InboundPassthroughIPv6
	}
	return b.spec.InboundPassthroughIPv4
}

func loopback(f nft.Family) netip.Addr {
	if f == nft.IPv6 {
		return loopbackV6
	}
	return loopbackV4
}

func tagSuffix(f nft.Family) string {
	if f == nft.IPv6 {
		return "-v6"
	}
	return "-v4"
}

// normalisePrefixes keeps fam's prefixes, masked, sorted, without any that
// lie inside another: an interval set refuses overlapping elements.
func normalisePrefixes(fam nft.Family, all []netip.Prefix) []netip.Prefix {
	var out []netip.Prefix
	for _, p := range all {
		if nft.AddrFamily(p.Addr()) == fam {
			out = append(out, p.Masked())
		}
	}
	slices.SortFunc(out, comparePrefixes)
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

// dropInvalid is istio-iptables' INVALID_DROP: packets conntrack cannot
// place (out of window, mostly) are dropped before anything is rewritten,
// instead of reaching the app un-NATed and drawing a reset.
func (b *builder) dropInvalid() nft.Chain {
	c := nft.MangleChain(chainInvalid, nft.HookPrerouting)
	c.Rules = []nft.Rule{{Tag: "drop-invalid", Matches: append(b.familyGuard(), nft.InvalidMatch{}), Verdict: nft.Drop()}}
	return c
}
