package workloads

import (
	"encoding/json"
	"fmt"
	"net/netip"
)

// UnmarshalJSON reads a journal record. IPs are journaled as prefixes
// ("10.1.0.5/24", netip.Prefix's text form), but agents before rpc parsed
// them journaled whatever string the caller sent: a bare address (as NRI
// and a pod's status give them) loads as a host prefix, and a value that is
// neither is left out and kept in skippedIPs for loadJournal to warn about.
// The record itself still loads: it is what tells the agent the pod's rules
// in the kernel are its own, and those agents skipped such a value too.
func (r *Record) UnmarshalJSON(b []byte) error {
	type plain Record // the fields without this method
	v := struct {
		*plain
		IPs []string `json:"ips,omitempty"` // shadows plain's
	}{plain: (*plain)(r)}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	r.IPs, r.skippedIPs = nil, nil
	for _, s := range v.IPs {
		if p, err := ParseIP(s); err == nil {
			r.IPs = append(r.IPs, p)
		} else {
			r.skippedIPs = append(r.skippedIPs, s)
		}
	}
	return nil
}

// ParseIP reads an attachment's address as a prefix: "10.1.0.5/24" as
// CNI results give it, or a bare "10.1.0.5" (NRI, a pod's status) as the
// host prefix 10.1.0.5/32. The prefix is kept as given, host bits and all:
// it is the pod's address, not a network.
func ParseIP(s string) (netip.Prefix, error) {
	if p, err := netip.ParsePrefix(s); err == nil {
		return p, nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%q is neither an IP prefix nor an IP address", s)
	}
	if a.Zone() != "" {
		// A prefix has no zone: it would be lost, and no pod address has one.
		return netip.Prefix{}, fmt.Errorf("%q has a zone; a pod address has none", s)
	}
	return HostPrefix(a), nil
}

// HostPrefix is a as a prefix of its own: /32 or /128.
func HostPrefix(a netip.Addr) netip.Prefix { return netip.PrefixFrom(a, a.BitLen()) }
