package main

import (
	"io"
	"testing"
)

// Istio's node agent reads the probe SNAT addresses from HOST_PROBE_SNAT_IP
// and HOST_PROBE_SNAT_IPV6; an istio-cni DaemonSet's env moved over
// unchanged keeps its addresses. The SLUICE_ variable and the flag win.
func TestProbeSNATAcceptsIstioEnvNames(t *testing.T) {
	istio := map[string]string{"HOST_PROBE_SNAT_IP": "169.254.9.9", "HOST_PROBE_SNAT_IPV6": "fd16::9"}
	c, err := parseConfig(nil, func(k string) string { return istio[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.probeSNATIPv4 != "169.254.9.9" || c.probeSNATIPv6 != "fd16::9" {
		t.Errorf("probe SNAT %s %s, want Istio's env values", c.probeSNATIPv4, c.probeSNATIPv6)
	}
	both := map[string]string{"HOST_PROBE_SNAT_IP": "169.254.9.9", "SLUICE_PROBE_SNAT_IPV4": "169.254.8.8"}
	if c, err = parseConfig(nil, func(k string) string { return both[k] }, io.Discard); err != nil || c.probeSNATIPv4 != "169.254.8.8" {
		t.Errorf("with both env names: %v %v, want SLUICE_PROBE_SNAT_IPV4's 169.254.8.8", c, err)
	}
	if c, err = parseConfig([]string{"--probe-snat-ipv4", "169.254.7.7"}, func(k string) string { return both[k] }, io.Discard); err != nil || c.probeSNATIPv4 != "169.254.7.7" {
		t.Errorf("with the flag: %v %v, want the flag's 169.254.7.7", c, err)
	}
	bad := map[string]string{"HOST_PROBE_SNAT_IP": "fd16::1"}
	if _, err := parseConfig(nil, func(k string) string { return bad[k] }, io.Discard); err == nil {
		t.Error("HOST_PROBE_SNAT_IP=fd16::1 (not IPv4) accepted")
	}
}
