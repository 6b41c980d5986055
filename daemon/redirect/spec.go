// Package redirect turns a Spec (what capture a pod gets) into an nftables
// ruleset and renders it as nft text. It knows nothing of Kubernetes or
// gRPC: policy decides the Spec, workloads decides when to apply it.
//
// This package decides what a pod (and the node's probe table) gets: the
// Spec, its validation, the builders per mode, and the kernel state beside
// the table (policy routes; ::6 on lo for IPv6 sidecars). It is pure (no
// netlink, no netns: deps_test.go), so a rule change is tested without
// root. How a table is modelled and rendered is package nft's; the one
// door to the kernel, which programs a Ruleset into a pod's network
// namespace in one transaction, removes it and reads it back, is the
// Kernel interface, implemented by package redirect/kernel.
//
// Every mode fails closed: with the proxy's inbound listener absent, a
// captured connection is refused (REDIRECT, ambient) or dropped (TPROXY),
// never delivered to the app.
//
// A pod's table is inet sluice, its chains named for what they hold
// (prerouting, inbound, in-redirect, output, outbound, out-redirect, dns,
// and reroute for reroute interfaces in TPROXY mode; DropInvalid's chain
// at mangle priority); each rule's tag is its nft comment, which Verify
// matches. DNS capture copies Istio's asymmetries: proxy-to-self skips 53
// for the uid rule only, the app-loopback return is TCP-only, a loopback
// prefix in the include list removes it, and the proxy's conntrack-zone
// rules accept after setting the zone. Rule fragments the builders share
// live in fragments.go, each keeping its tags. Build keeps the last
// 16 Rulesets (started over when full), hit only when the Spec is
// reflect.DeepEqual to a copy the caller cannot change.
package redirect

import (
	"net/netip"

	"github.com/sluicemesh/sluice/daemon/redirect/nft"
)

// Mode is the data plane a Spec captures for.
type Mode string

const (
	// ModeSidecar captures to an Envoy sidecar in the pod (istio-iptables).
	ModeSidecar Mode = "sidecar"
	// ModeAmbient captures to ztunnel's in-pod listeners (istio-cni's
	// in-pod ambient rules); see ambient.go.
	ModeAmbient Mode = "ambient"
)

// Interception is how captured TCP reaches the proxy.
type Interception string

const (
	// InterceptRedirect uses DNAT to the local proxy port; the proxy reads
	// the original destination with SO_ORIGINAL_DST.
	InterceptRedirect Interception = "REDIRECT"
	// InterceptTProxy hands inbound TCP to the proxy's transparent socket
	// without rewriting it: the original destination is the accepted
	// socket's local address. Packets are marked RouteMark and a policy
	// route delivers them locally. Outbound is still REDIRECT, as in Istio.
	InterceptTProxy Interception = "TPROXY"
)

// Spec is everything that decides a pod's ruleset. The zero value is not
// useful; start from DefaultSpec, which matches Istio's sidecar defaults,
// or DefaultAmbientSpec.
//
// The agent journals Specs as JSON. Fields added later carry json tags and
// their zero value means what the Spec meant before they existed, so an
// old journal still loads and builds the same ruleset.
type Spec struct {
	Mode         Mode
	Interception Interception

	// The proxy's own traffic, recognised by socket owner, is never captured.
	ProxyUID uint32
	ProxyGID uint32

	OutboundPort uint16 // Envoy's virtualOutbound listener (15001)
	InboundPort  uint16 // Envoy's virtualInbound listener (15006)
	// HBONEPort (15008) is never sent back to the inbound listener when the
	// proxy dials its own pod over loopback: that is the proxy's tunnel.
	HBONEPort uint16

	// Envoy's inbound passthrough cluster binds these sources (127.0.0.6,
	// ::6) when it forwards to the app over loopback; such traffic is
	// already proxied and must not be captured again.
	InboundPassthroughIPv4 netip.Addr
	InboundPassthroughIPv6 netip.Addr

	// Inbound TCP to these ports always passes (HBONE 15008, 15020 merged
	// metrics, 15021 health, 15090 Envoy stats). The builder passes exactly
	// this list in both interception modes, nothing more: policy decides
	// (Istio captures 15008 in TPROXY mode).
	InboundPassPorts []uint16
	// Inbound capture: IncludeInboundPorts empty means every port, unless
	// IncludeNoInboundPorts is set.
	IncludeInboundPorts []uint16
	// IncludeNoInboundPorts captures no inbound port at all (Istio's
	// includeInboundPorts=""). IncludeInboundPorts must then be empty.
	IncludeNoInboundPorts bool `json:"includeNoInboundPorts,omitempty"`
	ExcludeInboundPorts   []uint16
	// Outbound ports: excluded ones pass; included ones are captured even
	// when their destination is outside IncludeOutboundCIDRs.
	IncludeOutboundPorts []uint16
	ExcludeOutboundPorts []uint16
	// Outbound destinations: IncludeOutboundCIDRs empty means every address,
	// unless IncludeNoOutboundCIDRs is set. When it is not empty, a family
	// with no prefix in it is not captured at all, as istio-iptables does
	// with its separate v4 and v6 lists.
	IncludeOutboundCIDRs []netip.Prefix
	// IncludeNoOutboundCIDRs captures no destination by address (Istio's
	// includeOutboundIPRanges=""): only IncludeOutboundPorts are captured.
	// IncludeOutboundCIDRs must then be empty.
	IncludeNoOutboundCIDRs bool `json:"includeNoOutboundCIDRs,omitempty"`
	ExcludeOutboundCIDRs   []netip.Prefix
	// Traffic entering or leaving these interfaces is never captured.
	ExcludeInterfaces []string

	// DNS (UDP and TCP 53) to DNSPort when CaptureDNS is set, with
	// Istio's conntrack zones keeping the proxy's upstream queries apart
	// from the app's (dns.go). ExcludeOutboundPorts applies to UDP first.
	CaptureDNS bool
	DNSPort    uint16

	// The families captured. A sidecar with IPv6 also gets ::6/128 on lo
	// (InboundPassthroughIPv6). If the pod's lo has IPv6 disabled, the
	// kernel's Apply leaves out what lo cannot hold (IPv6 local routes,
	// ::6) and logs it.
	IPv4 bool
	IPv6 bool

	// Policy routing, used by TPROXY interception and by ambient: packets
	// whose mark under RouteMarkMask is RouteMark look up RouteTable
	// (ip rule preference RoutePriority), which routes everything to lo.
	// Istio: 1337/0xffffffff, table 133 for sidecars; 0x111/0xfff, table
	// 100 for ambient, where RouteMark is also the conntrack mark that
	// brings replies back to ztunnel.
	RouteMark     uint32 `json:"routeMark,omitempty"`
	RouteMarkMask uint32 `json:"routeMarkMask,omitempty"`
	RouteTable    uint32 `json:"routeTable,omitempty"`
	RoutePriority uint32 `json:"routePriority,omitempty"`

	// Ambient only. ztunnel marks its own sockets with ZtunnelMark (under
	// ZtunnelMarkMask); such traffic is never captured.
	ZtunnelMark     uint32 `json:"ztunnelMark,omitempty"`
	ZtunnelMarkMask uint32 `json:"ztunnelMarkMask,omitempty"`
	// The host table SNATs the kubelet's probes to these addresses (see
	// HostConfig); ambient pods let TCP from them in uncaptured.
	ProbeSNATIPv4 netip.Addr `json:"probeSNATIPv4,omitzero"`
	ProbeSNATIPv6 netip.Addr `json:"probeSNATIPv6,omitzero"`
	// DropInvalid drops packets conntrack calls INVALID before any capture
	// rule sees them (Istio's INVALID_DROP on istio-proxy).
	DropInvalid bool `json:"dropInvalid,omitempty"`
	// RerouteInterfaces: TCP arriving on these interfaces (a KubeVirt VM's
	// bridge) is captured as outbound, to OutboundPort (Istio's
	// istio.io/reroute-virtual-interfaces and the older
	// traffic.sidecar.istio.io/kubevirtInterfaces).
	RerouteInterfaces []string `json:"rerouteInterfaces,omitempty"`

	// BypassInboundCapture leaves inbound traffic alone (Istio's ingress
	// mode, for gateways): only outbound goes to ztunnel.
	BypassInboundCapture bool `json:"bypassInboundCapture,omitempty"`
}

// DefaultSpec is Istio's sidecar capture with every default.
func DefaultSpec() Spec {
	return Spec{
		Mode:             ModeSidecar,
		Interception:     InterceptRedirect,
		ProxyUID:         1337,
		ProxyGID:         1337,
		OutboundPort:     15001,
		InboundPort:      15006,
		HBONEPort:        15008,
		InboundPassPorts: []uint16{15008, 15020, 15021, 15090},
		DNSPort:          15053,

		InboundPassthroughIPv4: netip.MustParseAddr("127.0.0.6"),
		InboundPassthroughIPv6: netip.MustParseAddr("::6"),
		IPv4:                   true,
		IPv6:                   true,

		// Used only with InterceptTProxy.
		RouteMark:     1337,
		RouteMarkMask: nft.FullMask,
		RouteTable:    133,
		RoutePriority: 32764,
	}
}

// Istio's kubelet-probe SNAT addresses (istio-cni HOST_PROBE_SNAT_ADDRESS
// and HOST_PROBE_V6_SNAT_ADDRESS).
var (
	DefaultProbeSNATIPv4 = netip.MustParseAddr("169.254.7.127")
	DefaultProbeSNATIPv6 = netip.MustParseAddr("fd16:9254:7127:1337:ffff:ffff:ffff:ffff")
)

// DefaultAmbientSpec is istio-cni's in-pod ambient capture with every
// default: ztunnel's ports and marks, table 100, DNS capture on (Istio's
// chart default, cni.ambient.dnsCapture). Ambient inbound is always nat
// REDIRECT whatever Interception says; journals written when it was
// TPROXY still load and build today's rules.
func DefaultAmbientSpec() Spec {
	return Spec{
		Mode:            ModeAmbient,
		Interception:    InterceptRedirect,
		CaptureDNS:      true,
		OutboundPort:    15001,
		InboundPort:     15006,
		HBONEPort:       15008,
		DNSPort:         15053,
		ZtunnelMark:     0x539,
		ZtunnelMarkMask: 0xfff,
		RouteMark:       0x111,
		RouteMarkMask:   0xfff,
		RouteTable:      100,
		RoutePriority:   32764,
		ProbeSNATIPv4:   DefaultProbeSNATIPv4,
		ProbeSNATIPv6:   DefaultProbeSNATIPv6,
		IPv4:            true,
		IPv6:            true,
	}
}
