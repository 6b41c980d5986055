package main

import (
	"io"
	"strings"
	"testing"

	"github.com/sluicemesh/sluice/daemon/redirect"
)

// --probe-snat-uid: auto by default, a uid or none, from the flag or
// SLUICE_PROBE_SNAT_UID; the host table gets an explicit uid as it is and
// no uid for auto (the probe owner finds the kubelet's).
func TestProbeSNATUIDFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  string
		auto bool
		uid  redirect.UID
	}{
		{nil, "", true, redirect.UID{}},
		{[]string{"--probe-snat-uid", "auto"}, "", true, redirect.UID{}},
		{[]string{"--probe-snat-uid", "0"}, "", false, redirect.UIDOf(0)},
		{nil, "1000", false, redirect.UIDOf(1000)},
		{[]string{"--probe-snat-uid=none"}, "1000", false, redirect.UID{}},
	} {
		c, err := parseConfig(tc.args, func(k string) string {
			if k == "SLUICE_PROBE_SNAT_UID" {
				return tc.env
			}
			return ""
		}, io.Discard)
		if err != nil {
			t.Fatalf("%v env %q: %v", tc.args, tc.env, err)
		}
		if c.probeSNATUID.auto() != tc.auto || c.hostConfig().ProbeUID != tc.uid {
			t.Errorf("%v env %q: auto %v, host table uid %v; want %v, %v", tc.args, tc.env, c.probeSNATUID.auto(), c.hostConfig().ProbeUID, tc.auto, tc.uid)
		}
	}
	for _, bad := range []string{"root", "-1", "4294967295", "", " 0"} {
		if _, err := parseConfig([]string{"--probe-snat-uid=" + bad}, func(string) string { return "" }, io.Discard); err == nil || !strings.Contains(err.Error(), "probe-snat-uid") {
			t.Errorf("--probe-snat-uid=%q: err %v, want a probe-snat-uid error", bad, err)
		}
	}
}
