package redirect

import (
	"maps"
	"net/netip"
)

// Examples is one Spec per mode and option, by name. Each renders to
// testdata/<name>.nft, the golden a reviewer reads to see exactly what a
// pod gets, and the kernel tests (package redirect/kernel) apply every one
// of them to a real kernel. It lives here rather than in a test file so
// the two packages' tests share one list.
func Examples() map[string]Spec {
	all := sidecarExamples()
	maps.Copy(all, interceptionExamples())
	maps.Copy(all, ambientExamples())
	return all
}

// sidecarWith is the default sidecar Spec changed by f.
func sidecarWith(f func(*Spec)) Spec {
	s := DefaultSpec()
	f(&s)
	return s
}

// ambientWith is the default ambient Spec changed by f.
func ambientWith(f func(*Spec)) Spec {
	s := DefaultAmbientSpec()
	f(&s)
	return s
}

func sidecarExamples() map[string]Spec {
	with := sidecarWith
	return map[string]Spec{
		"sidecar-default":        DefaultSpec(),
		"inbound-include-ports":  with(func(s *Spec) { s.IncludeInboundPorts = []uint16{9080, 8080, 8080} }),
		"inbound-exclude-ports":  with(func(s *Spec) { s.ExcludeInboundPorts = []uint16{22, 9000} }),
		"outbound-include-ports": with(func(s *Spec) { s.IncludeOutboundPorts = []uint16{3306} }),
		"outbound-exclude-ports": with(func(s *Spec) { s.ExcludeOutboundPorts = []uint16{5432, 6379} }),
		"outbound-cidrs": with(func(s *Spec) {
			s.IncludeOutboundCIDRs = prefixes("10.96.0.0/12", "10.96.1.0/24", "fd00:96::/108")
			s.ExcludeOutboundCIDRs = prefixes("10.96.0.10/32", "169.254.169.254/32", "fd00:96::10/128", "fd00:99::/64")
		}),
		"exclude-interfaces": with(func(s *Spec) { s.ExcludeInterfaces = []string{"net1", "eth9"} }),
		"dns-capture":        with(func(s *Spec) { s.CaptureDNS = true }),
		"ipv4-only": with(func(s *Spec) {
			s.IPv6 = false
			s.CaptureDNS = true
			s.ExcludeOutboundCIDRs = prefixes("10.0.0.0/8")
		}),
		"ipv6-only": with(func(s *Spec) {
			s.IPv4 = false
			s.CaptureDNS = true
			s.ExcludeOutboundCIDRs = prefixes("fd00::/8")
		}),
		"inbound-no-ports": with(func(s *Spec) { s.IncludeNoInboundPorts = true }),
		"outbound-no-cidrs": with(func(s *Spec) {
			s.IncludeNoOutboundCIDRs = true
			s.IncludeOutboundPorts = []uint16{3306}
		}),
		"outbound-include-loopback": with(func(s *Spec) { s.IncludeOutboundCIDRs = prefixes("127.0.0.0/8", "10.96.0.0/12") }),
		"dns-capture-exclude-ports": with(func(s *Spec) {
			s.CaptureDNS = true
			s.ExcludeOutboundPorts = []uint16{53}
		}),
	}
}

// interceptionExamples are TPROXY, dropping invalid packets and rerouting
// interfaces.
func interceptionExamples() map[string]Spec {
	with := sidecarWith
	return map[string]Spec{
		"tproxy": with(func(s *Spec) { s.Interception = InterceptTProxy }),
		"tproxy-include-ports": with(func(s *Spec) {
			s.Interception = InterceptTProxy
			s.IncludeInboundPorts = []uint16{8080}
			s.ExcludeInterfaces = []string{"net1"}
			s.IPv6 = false
		}),
		"drop-invalid": with(func(s *Spec) { s.DropInvalid = true }),
		"reroute-interfaces": with(func(s *Spec) {
			s.RerouteInterfaces = []string{"k6t-eth0", "tap0"}
			s.IncludeOutboundCIDRs = prefixes("10.96.0.0/12", "fd00:96::/108")
		}),
		"tproxy-reroute-interfaces": with(func(s *Spec) {
			s.Interception = InterceptTProxy
			s.RerouteInterfaces = []string{"k6t-eth0"}
			s.DropInvalid = true
		}),
	}
}

func ambientExamples() map[string]Spec {
	return map[string]Spec{
		"ambient-default":            DefaultAmbientSpec(),
		"ambient-no-dns":             ambientWith(func(s *Spec) { s.CaptureDNS = false }),
		"ambient-reroute-interfaces": ambientWith(func(s *Spec) { s.RerouteInterfaces = []string{"k6t-eth0"} }),
		"ambient-bypass-inbound": ambientWith(func(s *Spec) {
			s.BypassInboundCapture = true
			s.CaptureDNS = true
		}),
		"ambient-ipv4-only": ambientWith(func(s *Spec) {
			s.IPv6 = false
			s.CaptureDNS = true
		}),
	}
}

// prefixes parses each of s, which must be a valid prefix.
func prefixes(s ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(s))
	for i, p := range s {
		out[i] = netip.MustParsePrefix(p)
	}
	return out
}
