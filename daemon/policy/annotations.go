package policy

import (
	"fmt"
	"net/netip"
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
// (the agent's defaults). An annotation that is present replaces base's
// value for its field, as istio-cni's annotation replaces its default; an
// absent one leaves base alone. Families base does not capture are dropped
// from CIDR lists rather than refused, so one annotation value serves
// single- and dual-stack clusters.
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

	if v, ok := ann[annIncludeOutboundCIDRs]; ok {
		// "*" is every destination; "" is none: istio-iptables then adds no
		// catch-all redirect and only includeOutboundPorts is captured.
		switch strings.TrimSpace(v) {
		case "*":
			s.IncludeOutboundCIDRs, s.IncludeNoOutboundCIDRs = nil, false
		case "":
			s.IncludeOutboundCIDRs, s.IncludeNoOutboundCIDRs = nil, true
		default:
			p, err := parseCIDRs(v, base)
			if err != nil {
				return s, &AnnotationError{annIncludeOutboundCIDRs, v, err}
			}
			// Every range may be of a family this node does not capture:
			// what is left is then "no destination", not "every destination".
			s.IncludeOutboundCIDRs, s.IncludeNoOutboundCIDRs = p, len(p) == 0
		}
	}
	if v, ok := ann[annExcludeOutboundCIDRs]; ok {
		// No wildcard here: istio-cni refuses "*" as an invalid CIDR.
		p, err := parseCIDRs(v, base)
		if err != nil {
			return s, &AnnotationError{annExcludeOutboundCIDRs, v, err}
		}
		s.ExcludeOutboundCIDRs = p
	}

	if v, ok := ann[annIncludeInboundPorts]; ok {
		// "*" is every port; "" is none: istio-iptables installs no inbound
		// capture at all.
		switch strings.TrimSpace(v) {
		case "*":
			s.IncludeInboundPorts, s.IncludeNoInboundPorts = nil, false
		case "":
			s.IncludeInboundPorts, s.IncludeNoInboundPorts = nil, true
		default:
			p, err := parsePorts(v)
			if err != nil {
				return s, &AnnotationError{annIncludeInboundPorts, v, err}
			}
			s.IncludeInboundPorts, s.IncludeNoInboundPorts = p, false
		}
	}
	// istio-cni's validator lets "*" through for the three lists below, but
	// istio-iptables then fails on "--dport *"; refusing it here gives the
	// same outcome with a clearer message.
	for _, f := range []struct {
		name string
		dst  *[]uint16
	}{
		// Inbound 15008/15020/15021/15090 always pass through
		// Spec.InboundPassPorts, as istio-cni always appends them here.
		{annExcludeInboundPorts, &s.ExcludeInboundPorts},
		{annIncludeOutboundPorts, &s.IncludeOutboundPorts},
		{annExcludeOutboundPorts, &s.ExcludeOutboundPorts},
	} {
		v, ok := ann[f.name]
		if !ok {
			continue
		}
		p, err := parsePorts(v)
		if err != nil {
			return s, &AnnotationError{f.name, v, err}
		}
		*f.dst = p
	}
	if _, ok := ann[annExcludeOutboundPorts]; !ok {
		s.ExcludeOutboundPorts = redirect.SortedPorts(append(s.ExcludeOutboundPorts, istioDefaultExcludeOutboundPorts...))
	}

	if v, ok := ann[annExcludeInterfaces]; ok {
		names, err := parseInterfaces(v)
		if err != nil {
			return s, &AnnotationError{annExcludeInterfaces, v, err}
		}
		s.ExcludeInterfaces = names
	}
	for _, name := range []string{annRerouteInterfaces, annKubevirtInterfaces} {
		if v := ann[name]; strings.TrimSpace(v) != "" {
			return s, &AnnotationError{name, v, errUnsupported("rerouting virtual interfaces")}
		}
	}
	return s, nil
}

func errUnsupported(what string) error {
	return fmt.Errorf("%s is not supported by sluice yet", what)
}

// elements splits a comma-separated annotation value. Space around an
// element is ignored; an empty element (",," or a trailing comma) is an
// error, as it is to istio-cni's validators.
func elements(v string) ([]string, error) {
	if strings.TrimSpace(v) == "" {
		return nil, nil
	}
	parts := strings.Split(v, ",")
	for i, p := range parts {
		parts[i] = strings.TrimSpace(p)
		if parts[i] == "" {
			return nil, fmt.Errorf("empty element %d", i+1)
		}
	}
	return parts, nil
}

// parsePorts reads a port list. Port 0 is refused: istio-cni would accept
// it and produce a rule that matches nothing the owner meant.
func parsePorts(v string) ([]uint16, error) {
	parts, err := elements(v)
	if err != nil || len(parts) == 0 {
		return nil, err
	}
	ports := make([]uint16, 0, len(parts))
	for _, p := range parts {
		n, err := strconv.ParseUint(p, 10, 16)
		if err != nil || n == 0 {
			return nil, fmt.Errorf("%q is not a port (1-65535)", p)
		}
		ports = append(ports, uint16(n))
	}
	return redirect.SortedPorts(ports), nil
}

// parseCIDRs reads a CIDR list (a bare address is refused, as by istio-cni)
// and keeps the prefixes of the families base captures.
func parseCIDRs(v string, base redirect.Spec) ([]netip.Prefix, error) {
	parts, err := elements(v)
	if err != nil {
		return nil, err
	}
	var out []netip.Prefix
	for _, p := range parts {
		pfx, err := netip.ParsePrefix(p)
		if err != nil {
			return nil, fmt.Errorf("%q is not a CIDR", p)
		}
		if pfx.Addr().Is4In6() {
			return nil, fmt.Errorf("%q is an IPv4-mapped IPv6 range; write it as IPv4", p)
		}
		if (pfx.Addr().Is4() && !base.IPv4) || (pfx.Addr().Is6() && !base.IPv6) {
			continue
		}
		out = append(out, pfx.Masked())
	}
	return redirect.SortedPrefixes(out), nil
}

// parseInterfaces reads interface names, held to what the kernel accepts
// (IFNAMSIZ, no '/' or whitespace) and nft text can carry (no quotes).
func parseInterfaces(v string) ([]string, error) {
	names, err := elements(v)
	if err != nil {
		return nil, err
	}
	for _, n := range names {
		if err := redirect.CheckInterfaceName(n); err != nil {
			return nil, fmt.Errorf("%q is not an interface name: %w", n, err)
		}
	}
	slices.Sort(names)
	return slices.Compact(names), nil
}
