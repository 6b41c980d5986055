package main

import (
	"fmt"
	"net/netip"

	"github.com/sluicemesh/sluice/daemon/redirect"
)

// The probe SNAT settings: one source for the host table and every
// ambient Spec.

// probeSNAT is --probe-snat-ipv4 and --probe-snat-ipv6, each checked to be
// an address of its family.
func (c *config) probeSNAT() (v4, v6 netip.Addr, err error) {
	v4, err = netip.ParseAddr(c.probeSNATIPv4)
	if err != nil || !v4.Is4() {
		return v4, v6, fmt.Errorf("--probe-snat-ipv4 %q: not an IPv4 address", c.probeSNATIPv4)
	}
	v6, err = netip.ParseAddr(c.probeSNATIPv6)
	if err != nil || !v6.Is6() || v6.Is4In6() {
		return v4, v6, fmt.Errorf("--probe-snat-ipv6 %q: not an IPv6 address", c.probeSNATIPv6)
	}
	return v4, v6, nil
}

// ambientBase is the in-pod ambient Spec every ambient pod starts from; its
// probe addresses must be the host table's (hostConfig), or probes reach
// ztunnel instead of the app.
func (c *config) ambientBase() redirect.Spec {
	spec := redirect.DefaultAmbientSpec()
	spec.ProbeSNATIPv4, spec.ProbeSNATIPv6, _ = c.probeSNAT() // checked by check
	return spec
}

// hostConfig is the host-side probe table's configuration. With
// --probe-snat-uid auto its uid is none: the probe owner puts the
// kubelet's in (probeaddrs_uid.go).
func (c *config) hostConfig() redirect.HostConfig {
	hc := redirect.DefaultHostConfig()
	hc.ProbeSNATIPv4, hc.ProbeSNATIPv6, _ = c.probeSNAT() // checked by check
	hc.ProbeUID = c.probeSNATUID.uid()
	return hc
}
