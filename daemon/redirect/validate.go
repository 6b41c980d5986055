package redirect

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// ifNameMax is IFNAMSIZ less the terminating NUL.
const ifNameMax = 15

// Validate reports what keeps s from becoming a correct ruleset: exactly
// the check Build makes, without building. policy runs it on every Spec
// it decides, so the ADD path builds the ruleset once (in workloads).
func (s Spec) Validate() error { return validate(s) }

// validate rejects a Spec that cannot become a correct ruleset, naming the
// field at fault. It reports every problem at once so an operator fixes a
// bad annotation set in one round.
func validate(s Spec) error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	switch {
	case s.Mode == ModeSidecar:
		if s.Interception != InterceptRedirect && s.Interception != InterceptTProxy {
			bad("interception %q: want %q or %q", s.Interception, InterceptRedirect, InterceptTProxy)
		}
	case s.Mode == ModeAmbient:
		// Ambient inbound is REDIRECT either way; TPROXY is what older
		// journals hold.
		if s.Interception != InterceptRedirect && s.Interception != InterceptTProxy {
			bad("interception %q: want %q or %q", s.Interception, InterceptRedirect, InterceptTProxy)
		}
		errs = append(errs, validateAmbient(s)...)
	default:
		bad("mode %q: want %q or %q", s.Mode, ModeSidecar, ModeAmbient)
	}
	if s.Mode == ModeAmbient || s.Interception == InterceptTProxy {
		errs = append(errs, validateRouting(s)...)
	}
	if s.IncludeNoInboundPorts && len(s.IncludeInboundPorts) > 0 {
		bad("IncludeNoInboundPorts is set but IncludeInboundPorts lists ports")
	}
	if s.IncludeNoOutboundCIDRs && len(s.IncludeOutboundCIDRs) > 0 {
		bad("IncludeNoOutboundCIDRs is set but IncludeOutboundCIDRs lists prefixes")
	}
	if !s.IPv4 && !s.IPv6 {
		bad("neither IPv4 nor IPv6 is enabled: nothing to capture")
	}
	errs = append(errs, validatePorts(s)...)
	errs = append(errs, validateAddrs(s)...)
	errs = append(errs, validateInterfaces(s)...)
	if len(errs) > 0 {
		return fmt.Errorf("invalid redirect spec: %w", errors.Join(errs...))
	}
	return nil
}

// validatePorts checks the listener ports and the port lists: 0 is no port.
func validatePorts(s Spec) []error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
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
	return errs
}

// validateAddrs checks the passthrough addresses and the CIDR lists
// against the families captured.
func validateAddrs(s Spec) []error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if s.Mode == ModeSidecar {
		if s.IPv4 && !s.InboundPassthroughIPv4.Is4() {
			bad("InboundPassthroughIPv4 %v is not an IPv4 address", s.InboundPassthroughIPv4)
		}
		if s.IPv6 && !isIPv6(s.InboundPassthroughIPv6) {
			bad("InboundPassthroughIPv6 %v is not an IPv6 address", s.InboundPassthroughIPv6)
		}
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
	return errs
}

// validateInterfaces checks the excluded and rerouted interface names.
func validateInterfaces(s Spec) []error {
	var errs []error
	for _, l := range []struct {
		name  string
		names []string
	}{{"ExcludeInterfaces", s.ExcludeInterfaces}, {"RerouteInterfaces", s.RerouteInterfaces}} {
		for _, name := range l.names {
			if err := CheckInterfaceName(name); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", l.name, err))
			}
		}
	}
	return errs
}

// CheckInterfaceName is the one rule for an interface name a Spec may
// hold: what the kernel accepts (1 to IFNAMSIZ-1 bytes, not "." or "..",
// no '/' or whitespace) and the nft text rendering can carry (no quote or
// backslash). policy parses annotations with it.
func CheckInterfaceName(name string) error {
	switch {
	case name == "":
		return errors.New("empty name")
	case len(name) > ifNameMax:
		return fmt.Errorf("%q is longer than %d bytes", name, ifNameMax)
	case name == "." || name == ".." || strings.ContainsAny(name, "/\"\\ \t\n\x00"):
		return fmt.Errorf("%q is not a valid interface name", name)
	}
	return nil
}

func isIPv6(a netip.Addr) bool { return a.Is6() && !a.Is4In6() }

// Route table ids the kernel itself uses: local, main, default, unspec.
var reservedTables = map[uint32]string{0: "unspec", 253: "default", 254: "main", 255: "local"}

// validateRouting checks the policy-routing fields TPROXY and ambient use.
func validateRouting(s Spec) []error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	switch {
	case s.RouteMarkMask == 0:
		bad("RouteMarkMask is 0")
	case s.RouteMark == 0 || s.RouteMark&^s.RouteMarkMask != 0:
		bad("RouteMark %#x is 0 or has bits outside RouteMarkMask %#x", s.RouteMark, s.RouteMarkMask)
	case s.Mode == ModeSidecar && (s.RouteMark+1)&s.RouteMarkMask == s.RouteMark:
		// istio-iptables' loopback mark is RouteMark+1, under the mask.
		bad("RouteMark %#x + 1 does not fit RouteMarkMask %#x", s.RouteMark, s.RouteMarkMask)
	}
	if name, ok := reservedTables[s.RouteTable]; ok {
		bad("RouteTable %d is the kernel's %s table", s.RouteTable, name)
	}
	// 0 is the local table's rule, 32766 main's, 32767 default's.
	if s.RoutePriority == 0 || s.RoutePriority >= 32766 {
		bad("RoutePriority %d: want 1 to 32765, ahead of the main table", s.RoutePriority)
	}
	return errs
}

// probeAddrErrors checks the probe SNAT addresses of the families in use,
// for the pod ruleset and the host table alike: each must be of its family.
func probeAddrErrors(ipv4 bool, v4 netip.Addr, ipv6 bool, v6 netip.Addr) []error {
	var errs []error
	if ipv4 && !v4.Is4() {
		errs = append(errs, fmt.Errorf("ProbeSNATIPv4 %v is not an IPv4 address", v4))
	}
	if ipv6 && !isIPv6(v6) {
		errs = append(errs, fmt.Errorf("ProbeSNATIPv6 %v is not an IPv6 address", v6))
	}
	return errs
}

// validateAmbient checks the ambient fields, and that no sidecar-only list
// is set: ambient has no place for it, and ignoring it silently would hide
// a policy mistake.
func validateAmbient(s Spec) []error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if s.ZtunnelMarkMask == 0 || s.ZtunnelMark == 0 || s.ZtunnelMark&^s.ZtunnelMarkMask != 0 {
		bad("ZtunnelMark %#x/%#x: want a non-zero mark inside a non-zero mask", s.ZtunnelMark, s.ZtunnelMarkMask)
	} else if s.RouteMark&s.ZtunnelMarkMask == s.ZtunnelMark {
		bad("RouteMark %#x matches ZtunnelMark %#x/%#x: ztunnel's traffic and the route mark must differ", s.RouteMark, s.ZtunnelMark, s.ZtunnelMarkMask)
	}
	errs = append(errs, probeAddrErrors(s.IPv4, s.ProbeSNATIPv4, s.IPv6, s.ProbeSNATIPv6)...)
	for _, f := range []struct {
		name string
		set  bool
	}{
		{"InboundPassPorts", len(s.InboundPassPorts) > 0},
		{"IncludeInboundPorts", len(s.IncludeInboundPorts) > 0},
		{"ExcludeInboundPorts", len(s.ExcludeInboundPorts) > 0},
		{"IncludeOutboundPorts", len(s.IncludeOutboundPorts) > 0},
		{"ExcludeOutboundPorts", len(s.ExcludeOutboundPorts) > 0},
		{"IncludeOutboundCIDRs", len(s.IncludeOutboundCIDRs) > 0},
		{"ExcludeOutboundCIDRs", len(s.ExcludeOutboundCIDRs) > 0},
		{"ExcludeInterfaces", len(s.ExcludeInterfaces) > 0},
		{"IncludeNoInboundPorts", s.IncludeNoInboundPorts},
		{"IncludeNoOutboundCIDRs", s.IncludeNoOutboundCIDRs},
	} {
		if f.set {
			bad("%s is a sidecar setting; ambient mode does not use it", f.name)
		}
	}
	return errs
}
