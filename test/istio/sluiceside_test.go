package istio

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/sluicemesh/sluice/daemon/policy"
	"github.com/sluicemesh/sluice/daemon/redirect"
)

// sluiceFacts runs sluice's Kubernetes policy on pod (with the runtime's
// addresses ips) and the redirect builder on its Spec.
func sluiceFacts(pod *corev1.Pod, ips []netip.Addr) (facts, policy.Decision, error) {
	d, err := policy.Rules{Sidecar: redirect.DefaultSpec()}.Decide(pod, nil, ips)
	if err != nil {
		return failed(), d, err
	}
	if !d.Capture {
		return facts{"result": "pass: " + d.Reason}, d, nil
	}
	rs, err := redirect.Build(d.Spec)
	if err != nil {
		return failed(), d, err
	}
	s := d.Spec
	f := facts{
		"result":              "capture",
		"interception":        string(s.Interception),
		"include-ports":       portList(ints(s.IncludeOutboundPorts)),
		"exclude-ports":       portList(ints(s.ExcludeOutboundPorts)),
		"app-loopback-return": strconv.FormatBool(strings.Contains(rs.Render(), `comment "app-uid-loopback"`)),
		"uid":                 fmt.Sprint(s.ProxyUID),
		"gid":                 fmt.Sprint(s.ProxyGID),
		"dns":                 strconv.FormatBool(s.CaptureDNS),
		"drop-invalid":        strconv.FormatBool(s.DropInvalid),
		"exclude-interfaces":  nameList(s.ExcludeInterfaces),
		"reroute-interfaces":  nameList(s.RerouteInterfaces),
		"ipv6":                strconv.FormatBool(s.IPv6),
		"reroute-to":          "-",
	}
	if len(s.RerouteInterfaces) > 0 {
		// The reroute rule runs ahead of inbound capture in every
		// interception mode (redirect/kernel/reroute_linux_test.go).
		f["reroute-to"] = rerouteOutbound
	}
	switch {
	case s.IncludeNoInboundPorts:
		f["interception"], f["inbound"] = "-", "none"
	case len(s.IncludeInboundPorts) == 0:
		f["inbound"] = "all except " + portList(append(ints(s.InboundPassPorts), ints(s.ExcludeInboundPorts)...))
	default:
		only := portList(minus(ints(s.IncludeInboundPorts), append(ints(s.InboundPassPorts), ints(s.ExcludeInboundPorts)...)))
		f["inbound"] = "only " + only
		if only == "[]" {
			f["inbound"] = "none"
		}
	}
	for _, fam := range []struct {
		key string
		on  bool
		is  func(netip.Prefix) bool
	}{
		{"-v4", s.IPv4, func(p netip.Prefix) bool { return p.Addr().Is4() }},
		{"-v6", s.IPv6, func(p netip.Prefix) bool { return p.Addr().Is6() }},
	} {
		if !fam.on {
			f["outbound"+fam.key], f["exclude"+fam.key] = "-", "-"
			continue
		}
		inc, exc := filter(s.IncludeOutboundCIDRs, fam.is), filter(s.ExcludeOutboundCIDRs, fam.is)
		switch {
		case s.IncludeNoOutboundCIDRs, len(s.IncludeOutboundCIDRs) > 0 && len(inc) == 0:
			f["outbound"+fam.key] = "none"
		case len(inc) == 0:
			f["outbound"+fam.key] = "all"
		default:
			f["outbound"+fam.key] = prefixList(inc)
		}
		f["exclude"+fam.key] = prefixList(exc)
	}
	return f, d, nil
}

func ints(p []uint16) []int {
	out := make([]int, len(p))
	for i, v := range p {
		out[i] = int(v)
	}
	return out
}

func minus(a, b []int) []int {
	var out []int
	for _, x := range a {
		found := false
		for _, y := range b {
			found = found || x == y
		}
		if !found {
			out = append(out, x)
		}
	}
	return out
}

func filter(ps []netip.Prefix, keep func(netip.Prefix) bool) []netip.Prefix {
	var out []netip.Prefix
	for _, p := range ps {
		if keep(p) {
			out = append(out, p)
		}
	}
	return out
}
