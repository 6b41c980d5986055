package policy

import (
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/sluicemesh/sluice/daemon/redirect"
)

// The Istio annotations that shape a sidecar pod's capture, read the way
// istio-cni's plugin (cni/pkg/plugin/sidecar_redirect.go) and istio-iptables
// read them, so a pod behaves the same under sluice as under Istio's CNI.
const (
	annInterceptionMode     = "sidecar.istio.io/interceptionMode"
	annIncludeOutboundCIDRs = "traffic.sidecar.istio.io/includeOutboundIPRanges"
	annExcludeOutboundCIDRs = "traffic.sidecar.istio.io/excludeOutboundIPRanges"
	annIncludeInboundPorts  = "traffic.sidecar.istio.io/includeInboundPorts"
	annExcludeInboundPorts  = "traffic.sidecar.istio.io/excludeInboundPorts"
	annIncludeOutboundPorts = "traffic.sidecar.istio.io/includeOutboundPorts"
	annExcludeOutboundPorts = "traffic.sidecar.istio.io/excludeOutboundPorts"
	annExcludeInterfaces    = "traffic.sidecar.istio.io/excludeInterfaces"
	// Both name interfaces whose traffic istio-iptables reroutes to the
	// proxy (KubeVirt VMs); the second is the deprecated spelling.
	annRerouteInterfaces  = "istio.io/reroute-virtual-interfaces"
	annKubevirtInterfaces = "traffic.sidecar.istio.io/kubevirtInterfaces"
)

// trafficAnnotations is every annotation SpecFromAnnotations reads, in the
// order a Decision lists them as inputs.
var trafficAnnotations = []string{
	annInterceptionMode,
	annIncludeOutboundCIDRs, annExcludeOutboundCIDRs,
	annIncludeInboundPorts, annExcludeInboundPorts,
	annIncludeOutboundPorts, annExcludeOutboundPorts,
	annExcludeInterfaces, annRerouteInterfaces, annKubevirtInterfaces,
}

// istioDefaultExcludeOutboundPorts is what istio-cni excludes outbound when
// the pod has no excludeOutboundPorts annotation: the status port, so one
// proxy's health and merged-metrics scrapes of another bypass capture.
var istioDefaultExcludeOutboundPorts = []uint16{15020}

// AnnotationError is an annotation whose value sluice cannot honour: it is
// malformed, or it asks for capture redirect.Spec cannot express. Either way
// the pod's ADD fails, so a pod never starts with part of the capture its
// owner asked for.
type AnnotationError struct {
	Annotation string
	Value      string
	Err        error
}

func (e *AnnotationError) Error() string {
	return fmt.Sprintf("annotation %s=%q: %v", e.Annotation, e.Value, e.Err)
}

func (e *AnnotationError) Unwrap() error { return e.Err }

// SpecFromAnnotations applies a pod's Istio traffic annotations to base
// (the agent's defaults, with the pod's IP families decided), value for
// value as istio-cni and istio-iptables read them; the differential test
// in test/istio holds this to Istio's own code. An annotation that is
// present replaces base's value for its field; an absent one leaves base
// alone. Values Istio accepts but that match no packet (port 0, an
// IPv4-mapped IPv6 range, a range of a family the pod does not capture)
// are left out, so the ruleset matches the same traffic.
func SpecFromAnnotations(base redirect.Spec, ann map[string]string) (redirect.Spec, error) {
	s := base
	// Slices are shared with base until replaced; clone the one we may
	// append to so base is never modified.
	s.ExcludeOutboundPorts = slices.Clone(base.ExcludeOutboundPorts)

	if v, ok := ann[annInterceptionMode]; ok {
		switch v {
		case "REDIRECT":
			s.Interception = redirect.InterceptRedirect
		case "TPROXY":
			// Envoy configured for TPROXY binds the original source address
			// when it forwards inbound traffic to the app and relies on the
			// mark-based routing of TPROXY capture to get replies back, so it
			// never falls back to REDIRECT.
			s.Interception = redirect.InterceptTProxy
		default:
			// istio-cni accepts exactly these two; NONE is refused there too.
			return s, &AnnotationError{annInterceptionMode, v, fmt.Errorf("want REDIRECT or TPROXY")}
		}
	}
	if err := outboundCIDRs(&s, ann); err != nil {
		return s, err
	}
	if err := portLists(&s, base, ann); err != nil {
		return s, err
	}
	return s, interfaces(&s, ann)
}

// outboundCIDRs reads the include and exclude range lists. Istio parses
// each element as it stands: a space around one is an error.
func outboundCIDRs(s *redirect.Spec, ann map[string]string) error {
	if v, ok := ann[annIncludeOutboundCIDRs]; ok {
		// Exactly "*" is every destination; "" is none: istio-iptables
		// then adds no catch-all redirect and only includeOutboundPorts
		// are captured.
		switch v {
		case "*":
			s.IncludeOutboundCIDRs, s.IncludeNoOutboundCIDRs = nil, false
		default:
			p, err := parseCIDRs(v, *s)
			if err != nil {
				return &AnnotationError{annIncludeOutboundCIDRs, v, err}
			}
			// Every range may be of a family this pod does not capture:
			// what is left is then "no destination", not "every destination".
			s.IncludeOutboundCIDRs, s.IncludeNoOutboundCIDRs = p, len(p) == 0
		}
	}
	if v, ok := ann[annExcludeOutboundCIDRs]; ok {
		// No wildcard here: istio-cni refuses "*" as an invalid CIDR.
		p, err := parseCIDRs(v, *s)
		if err != nil {
			return &AnnotationError{annExcludeOutboundCIDRs, v, err}
		}
		s.ExcludeOutboundCIDRs = p
	}
	return nil
}

// portLists reads the four port lists and decides which inbound ports
// always pass: istio-iptables returns 15008 from the nat chain only (TPROXY
// captures it) and the proxy's own 15020/15021/15090, which istio-cni
// appends to excludeInboundPorts, only when every inbound port is captured:
// with an include list the exclusions are not read at all.
func portLists(s *redirect.Spec, base redirect.Spec, ann map[string]string) error {
	if v, ok := ann[annIncludeInboundPorts]; ok {
		switch v {
		case "*":
			s.IncludeInboundPorts, s.IncludeNoInboundPorts = nil, false
		default:
			p, err := parsePorts(v)
			if err != nil {
				return &AnnotationError{annIncludeInboundPorts, v, err}
			}
			s.IncludeInboundPorts, s.IncludeNoInboundPorts = p, len(p) == 0
		}
	}
	// istio-cni's validator lets "*" through for the three lists below, but
	// istio-iptables then fails on "--dport *"; refusing it here gives the
	// same outcome with a clearer message.
	for _, f := range []struct {
		name string
		dst  *[]uint16
	}{
		{annExcludeInboundPorts, &s.ExcludeInboundPorts},
		{annIncludeOutboundPorts, &s.IncludeOutboundPorts},
		{annExcludeOutboundPorts, &s.ExcludeOutboundPorts},
	} {
		v, ok := ann[f.name]
		if !ok {
			continue
		}
		if f.name == annExcludeInboundPorts {
			v = strings.TrimSpace(v) // istio-cni trims this one before use
		}
		p, err := parsePorts(v)
		if err != nil {
			return &AnnotationError{f.name, ann[f.name], err}
		}
		*f.dst = p
	}
	if _, ok := ann[annExcludeOutboundPorts]; !ok {
		s.ExcludeOutboundPorts = redirect.SortedPorts(append(s.ExcludeOutboundPorts, istioDefaultExcludeOutboundPorts...))
	}
	everyPort := !s.IncludeNoInboundPorts && len(s.IncludeInboundPorts) == 0
	if !everyPort {
		s.ExcludeInboundPorts = nil
	}
	s.InboundPassPorts = nil
	for _, p := range base.InboundPassPorts {
		switch {
		case p == base.HBONEPort && s.Interception == redirect.InterceptTProxy:
		case p == base.HBONEPort, everyPort:
			s.InboundPassPorts = append(s.InboundPassPorts, p)
		}
	}
	return nil
}

// interfaces reads excludeInterfaces and the reroute lists: the current
// reroute annotation wins whenever it is present, even empty, over the
// deprecated kubevirtInterfaces.
func interfaces(s *redirect.Spec, ann map[string]string) error {
	if v, ok := ann[annExcludeInterfaces]; ok {
		names, err := parseInterfaces(v)
		if err != nil {
			return &AnnotationError{annExcludeInterfaces, v, err}
		}
		s.ExcludeInterfaces = names
	}
	for _, name := range []string{annRerouteInterfaces, annKubevirtInterfaces} {
		v, ok := ann[name]
		if !ok {
			continue
		}
		names, err := parseInterfaces(v)
		if err != nil {
			return &AnnotationError{name, v, err}
		}
		s.RerouteInterfaces = names
		break
	}
	return nil
}

// parsePorts reads a port list as istio-cni does: blanks around the list
// and each element are ignored, an empty element is an error. Port 0 is
// accepted and dropped: istio-iptables programs it, and it matches nothing.
// A list of nothing but blanks passes istio-cni's check and then breaks
// istio-iptables' rule ("--dport  -j"), so it is an error too.
func parsePorts(v string) ([]uint16, error) {
	if v != "" && strings.TrimSpace(v) == "" {
		return nil, fmt.Errorf("a list of blanks is not a port list")
	}
	v = strings.TrimSpace(v)
	if v == "" {
		return nil, nil
	}
	var ports []uint16
	for _, p := range strings.Split(v, ",") {
		n, err := strconv.ParseUint(strings.TrimSpace(p), 10, 16)
		if err != nil {
			return nil, fmt.Errorf("%q is not a port (0-65535)", p)
		}
		if n != 0 {
			ports = append(ports, uint16(n))
		}
	}
	return redirect.SortedPorts(ports), nil
}

// parseCIDRs reads a CIDR list as istio-cni does (a bare address, or a
// blank around an element, is refused) and keeps the prefixes of the
// families s captures. IPv4-mapped IPv6 ranges are valid to Istio, which
// puts them in its IPv6 rules, where no packet carries such an address:
// they are dropped.
func parseCIDRs(v string, s redirect.Spec) ([]netip.Prefix, error) {
	if v == "" {
		return nil, nil
	}
	var out []netip.Prefix
	for _, p := range strings.Split(v, ",") {
		pfx, err := netip.ParsePrefix(p)
		if err != nil {
			return nil, fmt.Errorf("%q is not a CIDR", p)
		}
		if pfx.Addr().Is4In6() || (pfx.Addr().Is4() && !s.IPv4) || (pfx.Addr().Is6() && !s.IPv6) {
			continue
		}
		out = append(out, pfx.Masked())
	}
	return redirect.SortedPrefixes(out), nil
}

// ifaceName is Istio's rule for an interface name (pkg/util/net).
var ifaceName = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9_.\-]*$`)

// parseInterfaces reads interface names as istio-cni does: blanks around
// each are ignored; an empty one, one over IFNAMSIZ or one that is not a
// letter followed by letters, digits, '_', '.' or '-' is an error.
func parseInterfaces(v string) ([]string, error) {
	if v == "" {
		return nil, nil
	}
	var names []string
	for _, n := range strings.Split(v, ",") {
		names = append(names, strings.TrimSpace(n))
	}
	if err := checkInterfaceNames(names); err != nil {
		return nil, err
	}
	slices.Sort(names)
	return slices.Compact(names), nil
}

func checkInterfaceNames(names []string) error {
	for _, n := range names {
		switch {
		case n == "":
			return fmt.Errorf("empty interface name")
		case len(n) > 15:
			return fmt.Errorf("interface name %q is longer than 15 bytes", n)
		case !ifaceName.MatchString(n):
			return fmt.Errorf("%q is not an interface name", n)
		}
	}
	return nil
}
