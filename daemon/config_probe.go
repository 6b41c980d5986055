package main

import (
	"fmt"
	"math"
	"net/netip"
	"strconv"

	"github.com/sluicemesh/sluice/daemon/redirect"
)

// The probe SNAT settings: one source for the host table and every
// ambient Spec.

// probeUIDFlag is --probe-snat-uid: auto, none, or a uid.
type probeUIDFlag struct{ s string }

const (
	probeUIDAuto = "auto"
	probeUIDNone = "none"
)

func (f *probeUIDFlag) String() string { return f.s }

func (f *probeUIDFlag) Set(s string) error {
	if s != probeUIDAuto && s != probeUIDNone {
		// (uid_t)-1 is no uid: setresuid takes it for "unchanged".
		if n, err := strconv.ParseUint(s, 10, 32); err != nil || n == math.MaxUint32 {
			return fmt.Errorf("want auto, none or a uid, got %q", s)
		}
	}
	f.s = s
	return nil
}

// auto is whether the uid is the running kubelet's.
func (f *probeUIDFlag) auto() bool { return f.s == probeUIDAuto || f.s == "" }

// uid is the uid the flag names; none for none and for auto.
func (f *probeUIDFlag) uid() redirect.UID {
	n, err := strconv.ParseUint(f.s, 10, 32)
	if err != nil {
		return redirect.UID{}
	}
	return redirect.UIDOf(uint32(n))
}

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
// --probe-snat-uid auto its uid is none: daemon/ambientmesh's probe owner
// puts the kubelet's in.
func (c *config) hostConfig() redirect.HostConfig {
	hc := redirect.DefaultHostConfig()
	hc.ProbeSNATIPv4, hc.ProbeSNATIPv6, _ = c.probeSNAT() // checked by check
	hc.ProbeUID = c.probeSNATUID.uid()
	return hc
}
