// Package redirect turns a Spec (what capture a pod gets) into an nftables
// ruleset, renders it as nft text, and programs it into a pod's network
// namespace over netlink in one transaction. It knows nothing of Kubernetes
// or gRPC: policy decides the Spec, workloads decides when to apply it.
package redirect

import "net/netip"

// Mode is the data plane a Spec captures for.
type Mode string

const (
	ModeSidecar Mode = "sidecar"
)

// Interception is how captured TCP reaches the proxy.
type Interception string

const (
	// InterceptRedirect uses DNAT to the local proxy port; the proxy reads
	// the original destination with SO_ORIGINAL_DST.
	InterceptRedirect Interception = "REDIRECT"
)

// Spec is everything that decides a pod's ruleset. The zero value is not
// useful; start from DefaultSpec, which matches Istio's sidecar defaults.
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
	// metrics, 15021 health, 15090 Envoy stats).
	InboundPassPorts []uint16
	// Inbound capture: IncludeInboundPorts empty means every port.
	IncludeInboundPorts []uint16
	ExcludeInboundPorts []uint16
	// Outbound ports: excluded ones pass; included ones are captured even
	// when their destination is outside IncludeOutboundCIDRs.
	IncludeOutboundPorts []uint16
	ExcludeOutboundPorts []uint16
	// Outbound destinations: IncludeOutboundCIDRs empty means every address.
	// When it is not empty, a family with no prefix in it is not captured at
	// all, as istio-iptables does with its separate v4 and v6 lists.
	IncludeOutboundCIDRs []netip.Prefix
	ExcludeOutboundCIDRs []netip.Prefix
	// Traffic entering or leaving these interfaces is never captured.
	ExcludeInterfaces []string

	// DNS (UDP and TCP 53) to DNSPort when CaptureDNS is set.
	CaptureDNS bool
	DNSPort    uint16

	IPv4 bool
	IPv6 bool
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
	}
}
