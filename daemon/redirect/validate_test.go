package redirect

import (
	"net/netip"
	"strings"
	"testing"
)

// Validate is Build's own check: it accepts what Build accepts and
// refuses with the same error what Build refuses.
func TestValidateAgreesWithBuild(t *testing.T) {
	for name, s := range Examples() {
		if err := s.Validate(); err != nil {
			t.Errorf("%s: Validate refused a spec Build takes: %v", name, err)
		}
	}
	bad := DefaultSpec()
	bad.OutboundPort = 0
	bad.ExcludeInterfaces = []string{"this-name-is-far-too-long"}
	verr := bad.Validate()
	_, berr := Build(bad)
	if verr == nil || berr == nil || verr.Error() != berr.Error() {
		t.Fatalf("Validate: %v; Build: %v; want the same error from both", verr, berr)
	}
}

// The probe addresses are checked by one rule for the pod ruleset and the
// host table: the same wrong address is refused by both, in the same words.
func TestProbeAddressesOneRule(t *testing.T) {
	v4 := DefaultProbeSNATIPv4
	for _, tc := range []struct {
		name     string
		spec     func(*Spec)
		host     func(*HostConfig)
		complain string
	}{
		{"v6 in the v4 slot", func(s *Spec) { s.ProbeSNATIPv4 = DefaultProbeSNATIPv6 }, func(c *HostConfig) { c.ProbeSNATIPv4 = DefaultProbeSNATIPv6 }, "ProbeSNATIPv4"},
		{"v4 in the v6 slot", func(s *Spec) { s.ProbeSNATIPv6 = v4 }, func(c *HostConfig) { c.ProbeSNATIPv6 = v4 }, "ProbeSNATIPv6"},
		{"v4-mapped in the v6 slot", func(s *Spec) { s.ProbeSNATIPv6 = netip.AddrFrom16(v4.As16()) }, func(c *HostConfig) { c.ProbeSNATIPv6 = netip.AddrFrom16(v4.As16()) }, "ProbeSNATIPv6"},
	} {
		s := DefaultAmbientSpec()
		tc.spec(&s)
		cfg := DefaultHostConfig()
		tc.host(&cfg)
		serr := s.Validate()
		_, herr := BuildHost(cfg)
		if serr == nil || herr == nil || !strings.Contains(serr.Error(), tc.complain) || !strings.Contains(herr.Error(), tc.complain) {
			t.Errorf("%s: spec %v; host %v", tc.name, serr, herr)
		}
	}
}

// Interface names have one rule, for both lists that hold them (the
// reroute list was not checked at all before).
func TestInterfaceNamesOneRule(t *testing.T) {
	for _, name := range []string{"", ".", "..", "a b", "a/b", `a"b`, "abcdefghijklmnop"} {
		if CheckInterfaceName(name) == nil {
			t.Errorf("%q accepted", name)
		}
		for _, field := range []string{"ExcludeInterfaces", "RerouteInterfaces"} {
			s := DefaultSpec()
			if field == "ExcludeInterfaces" {
				s.ExcludeInterfaces = []string{name}
			} else {
				s.RerouteInterfaces = []string{name}
			}
			if err := s.Validate(); err == nil || !strings.Contains(err.Error(), field) {
				t.Errorf("%s %q: %v", field, name, err)
			}
		}
	}
	for _, name := range []string{"eth0", "net1", "tap-vm.1", "abcdefghijklmno"} {
		if err := CheckInterfaceName(name); err != nil {
			t.Errorf("%q refused: %v", name, err)
		}
	}
}
