package redirect

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// ifNameMax is IFNAMSIZ less the terminating NUL.
const ifNameMax = 15

// validate rejects a Spec that cannot become a correct ruleset, naming the
// field at fault. It reports every problem at once so an operator fixes a
// bad annotation set in one round.
func validate(s Spec) error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	if s.Mode != ModeSidecar {
		bad("mode %q: only %q is supported", s.Mode, ModeSidecar)
	}
	if s.Interception != InterceptRedirect {
		bad("interception %q: only %q is supported", s.Interception, InterceptRedirect)
	}
	if !s.IPv4 && !s.IPv6 {
		bad("neither IPv4 nor IPv6 is enabled: nothing to capture")
	}
	for _, p := range []struct {
		name string
		port uint16
	}{{"OutboundPort", s.OutboundPort}, {"InboundPort", s.InboundPort}, {"HBONEPort", s.HBONEPort}} {
		if p.port == 0 {
			bad("%s is 0", p.name)
		}
	}
	if s.CaptureDNS && s.DNSPort == 0 {
		bad("CaptureDNS is set but DNSPort is 0")
	}
	for _, l := range []struct {
		name  string
		ports []uint16
	}{
		{"InboundPassPorts", s.InboundPassPorts},
		{"IncludeInboundPorts", s.IncludeInboundPorts},
		{"ExcludeInboundPorts", s.ExcludeInboundPorts},
		{"IncludeOutboundPorts", s.IncludeOutboundPorts},
		{"ExcludeOutboundPorts", s.ExcludeOutboundPorts},
	} {
		for _, p := range l.ports {
			if p == 0 {
				bad("%s contains port 0", l.name)
			}
		}
	}
	if s.IPv4 && !s.InboundPassthroughIPv4.Is4() {
		bad("InboundPassthroughIPv4 %v is not an IPv4 address", s.InboundPassthroughIPv4)
	}
	if s.IPv6 && (!s.InboundPassthroughIPv6.Is6() || s.InboundPassthroughIPv6.Is4In6()) {
		bad("InboundPassthroughIPv6 %v is not an IPv6 address", s.InboundPassthroughIPv6)
	}
	for _, l := range []struct {
		name     string
		prefixes []netip.Prefix
	}{{"IncludeOutboundCIDRs", s.IncludeOutboundCIDRs}, {"ExcludeOutboundCIDRs", s.ExcludeOutboundCIDRs}} {
		for _, p := range l.prefixes {
			switch {
			case !p.IsValid():
				bad("%s: invalid prefix %v", l.name, p)
			case p.Addr().Is4In6():
				bad("%s: %v is an IPv4-mapped IPv6 prefix; write it as IPv4", l.name, p)
			case p.Addr().Is4() && !s.IPv4:
				bad("%s: %v is IPv4 but IPv4 capture is off", l.name, p)
			case p.Addr().Is6() && !s.IPv6:
				bad("%s: %v is IPv6 but IPv6 capture is off", l.name, p)
			}
		}
	}
	for _, name := range s.ExcludeInterfaces {
		switch {
		case name == "":
			bad("ExcludeInterfaces contains an empty name")
		case len(name) > ifNameMax:
			bad("ExcludeInterfaces: %q is longer than %d bytes", name, ifNameMax)
		case strings.ContainsAny(name, "/\"\\ \t\n\x00"):
			// The kernel refuses '/' and whitespace; a quote or backslash
			// would not survive the nft text rendering.
			bad("ExcludeInterfaces: %q is not a valid interface name", name)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("invalid redirect spec: %w", errors.Join(errs...))
	}
	return nil
}
