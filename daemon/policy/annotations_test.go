package policy

import (
	"errors"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/sluicemesh/sluice/daemon/redirect"
)

func prefixes(s ...string) []netip.Prefix {
	out := make([]netip.Prefix, 0, len(s))
	for _, p := range s {
		out = append(out, netip.MustParsePrefix(p))
	}
	return out
}

// want is DefaultSpec with Istio's default outbound 15020 exclusion, then
// edit applied: what a pod with no annotation but those under test gets.
func want(edit func(*redirect.Spec)) redirect.Spec {
	s := redirect.DefaultSpec()
	s.ExcludeOutboundPorts = []uint16{15020}
	if edit != nil {
		edit(&s)
	}
	return s
}

func TestSpecFromAnnotations(t *testing.T) {
	for _, tc := range []struct {
		name string
		ann  map[string]string
		want redirect.Spec
	}{
		{"none", nil, want(nil)},
		{"redirect", map[string]string{annInterceptionMode: "REDIRECT"}, want(nil)},
		{"outbound cidrs all", map[string]string{annIncludeOutboundCIDRs: "*"}, want(nil)},
		{"outbound cidrs", map[string]string{annIncludeOutboundCIDRs: "10.0.0.0/8,192.168.1.7/24,fd00::/8,10.0.0.0/8"},
			want(func(s *redirect.Spec) { s.IncludeOutboundCIDRs = prefixes("10.0.0.0/8", "192.168.1.0/24", "fd00::/8") })},
		{"exclude cidrs", map[string]string{annExcludeOutboundCIDRs: "169.254.169.254/32"},
			want(func(s *redirect.Spec) { s.ExcludeOutboundCIDRs = prefixes("169.254.169.254/32") })},
		{"exclude cidrs empty", map[string]string{annExcludeOutboundCIDRs: ""}, want(nil)},
		{"inbound ports all", map[string]string{annIncludeInboundPorts: "*"}, want(nil)},
		{"tproxy", map[string]string{annInterceptionMode: "TPROXY"},
			want(func(s *redirect.Spec) {
				s.Interception = redirect.InterceptTProxy
				s.InboundPassPorts = []uint16{15020, 15021, 15090}
			})},
		{"no outbound cidr", map[string]string{annIncludeOutboundCIDRs: ""},
			want(func(s *redirect.Spec) { s.IncludeNoOutboundCIDRs = true })},
		{"exclude inbound blank", map[string]string{annExcludeInboundPorts: " "}, want(nil)},
		{"inbound port 0 is none", map[string]string{annIncludeInboundPorts: "0"}, noInbound},
		{"inbound ports", map[string]string{annIncludeInboundPorts: " 8080, 80,8080 "},
			want(func(s *redirect.Spec) {
				s.IncludeInboundPorts = []uint16{80, 8080}
				s.InboundPassPorts = []uint16{15008}
			})},
		{"inbound ports ignore exclusions", map[string]string{annIncludeInboundPorts: "8080", annExcludeInboundPorts: "8080"},
			want(func(s *redirect.Spec) {
				s.IncludeInboundPorts = []uint16{8080}
				s.InboundPassPorts = []uint16{15008}
			})},
		{"tproxy captures 15008", map[string]string{annInterceptionMode: "TPROXY", annExcludeInboundPorts: "9000,0"},
			want(func(s *redirect.Spec) {
				s.Interception = redirect.InterceptTProxy
				s.InboundPassPorts = []uint16{15020, 15021, 15090}
				s.ExcludeInboundPorts = []uint16{9000}
			})},
		{"ipv4-mapped ranges match nothing", map[string]string{annIncludeOutboundCIDRs: "::ffff:10.0.0.0/104"},
			want(func(s *redirect.Spec) { s.IncludeNoOutboundCIDRs = true })},
		{"outbound port 0 is dropped", map[string]string{annIncludeOutboundPorts: "0,443"},
			want(func(s *redirect.Spec) { s.IncludeOutboundPorts = []uint16{443} })},
		{"exclude inbound ports", map[string]string{annExcludeInboundPorts: "9000"},
			want(func(s *redirect.Spec) { s.ExcludeInboundPorts = []uint16{9000} })},
		{"include outbound ports", map[string]string{annIncludeOutboundPorts: "443,80"},
			want(func(s *redirect.Spec) { s.IncludeOutboundPorts = []uint16{80, 443} })},
		{"exclude outbound ports replace the 15020 default", map[string]string{annExcludeOutboundPorts: "5432"},
			want(func(s *redirect.Spec) { s.ExcludeOutboundPorts = []uint16{5432} })},
		{"exclude outbound ports empty", map[string]string{annExcludeOutboundPorts: ""},
			want(func(s *redirect.Spec) { s.ExcludeOutboundPorts = nil })},
		{"exclude interfaces", map[string]string{annExcludeInterfaces: "eth1, net1"},
			want(func(s *redirect.Spec) { s.ExcludeInterfaces = []string{"eth1", "net1"} })},
		{"empty reroute interfaces", map[string]string{annRerouteInterfaces: ""}, want(nil)},
		{"reroute interfaces", map[string]string{annRerouteInterfaces: "net1 , kv0"},
			want(func(s *redirect.Spec) { s.RerouteInterfaces = []string{"kv0", "net1"} })},
		{"kubevirt interfaces", map[string]string{annKubevirtInterfaces: "net1"},
			want(func(s *redirect.Spec) { s.RerouteInterfaces = []string{"net1"} })},
		{"reroute wins even empty", map[string]string{annRerouteInterfaces: "", annKubevirtInterfaces: "net1"}, want(nil)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := SpecFromAnnotations(redirect.DefaultSpec(), tc.ann)
			if err != nil {
				t.Fatalf("SpecFromAnnotations: %v", err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("spec\n got %+v\nwant %+v", got, tc.want)
			}
			if _, err := redirect.Build(got); err != nil {
				t.Errorf("Build: %v", err)
			}
		})
	}
}

var noInbound = want(func(s *redirect.Spec) {
	s.IncludeNoInboundPorts = true
	s.InboundPassPorts = []uint16{15008}
})

func TestSpecFromAnnotationsDropsDisabledFamilies(t *testing.T) {
	base := redirect.DefaultSpec()
	base.IPv6 = false
	got, err := SpecFromAnnotations(base, map[string]string{
		annIncludeOutboundCIDRs: "10.0.0.0/8,fd00::/8",
		annExcludeOutboundCIDRs: "fd00:1::/64",
	})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.IncludeOutboundCIDRs, prefixes("10.0.0.0/8")) || got.ExcludeOutboundCIDRs != nil {
		t.Errorf("include %v exclude %v, want [10.0.0.0/8] and none", got.IncludeOutboundCIDRs, got.ExcludeOutboundCIDRs)
	}
	got, err = SpecFromAnnotations(base, map[string]string{annIncludeOutboundCIDRs: "fd00::/8"})
	if err != nil || !got.IncludeNoOutboundCIDRs {
		t.Errorf("only-IPv6 ranges on an IPv4 node: got %v %v, want capture no destination", got.IncludeNoOutboundCIDRs, err)
	}
}

func TestSpecFromAnnotationsBase(t *testing.T) {
	base := redirect.DefaultSpec()
	base.ExcludeOutboundPorts = []uint16{9999}
	base.IncludeInboundPorts = []uint16{80}
	got, err := SpecFromAnnotations(base, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.ExcludeOutboundPorts, []uint16{9999, 15020}) || !reflect.DeepEqual(got.IncludeInboundPorts, []uint16{80}) {
		t.Errorf("exclude outbound %v include inbound %v: want base kept and 15020 added", got.ExcludeOutboundPorts, got.IncludeInboundPorts)
	}
	if !reflect.DeepEqual(base.ExcludeOutboundPorts, []uint16{9999}) {
		t.Errorf("base modified: %v", base.ExcludeOutboundPorts)
	}
	got, err = SpecFromAnnotations(base, map[string]string{annIncludeInboundPorts: "*"})
	if err != nil {
		t.Fatal(err)
	}
	if got.IncludeInboundPorts != nil {
		t.Errorf("includeInboundPorts=* over a base list: got %v, want every port", got.IncludeInboundPorts)
	}
}

func TestSpecFromAnnotationsInvalid(t *testing.T) {
	for _, tc := range []struct {
		ann, value, why string
	}{
		{annInterceptionMode, "NONE", "want REDIRECT or TPROXY"},
		{annInterceptionMode, "redirect", "want REDIRECT or TPROXY"},
		{annIncludeOutboundCIDRs, "10.0.0.0", "not a CIDR"},
		{annIncludeOutboundCIDRs, "10.0.0.0/33", "not a CIDR"},
		{annIncludeOutboundCIDRs, "*,10.0.0.0/8", "not a CIDR"},
		{annIncludeOutboundCIDRs, "10.0.0.0/8,", "not a CIDR"},
		{annIncludeOutboundCIDRs, "10.0.0.0/8, 10.1.0.0/16", "not a CIDR"},
		{annIncludeOutboundCIDRs, " *", "not a CIDR"},
		{annIncludeOutboundCIDRs, " ", "not a CIDR"},
		{annExcludeOutboundCIDRs, "*", "not a CIDR"},
		{annExcludeOutboundCIDRs, "fe80::1%eth0/64", "not a CIDR"},
		{annIncludeInboundPorts, "http", "not a port"},
		{annIncludeInboundPorts, " * ", "not a port"},
		{annIncludeInboundPorts, " ", "blanks"},
		{annIncludeOutboundPorts, "  ", "blanks"},
		{annExcludeOutboundPorts, " ", "blanks"},
		{annExcludeInboundPorts, "65536", "not a port"},
		{annExcludeInboundPorts, "*", "not a port"},
		{annIncludeOutboundPorts, "*", "not a port"},
		{annExcludeOutboundPorts, "80,,443", "not a port"},
		{annExcludeOutboundPorts, "-1", "not a port"},
		{annExcludeInterfaces, "averyveryverylongname", "longer than 15"},
		{annExcludeInterfaces, "eth0/1", "not an interface name"},
		{annExcludeInterfaces, "1eth", "not an interface name"},
		{annExcludeInterfaces, "eth0,", "empty interface name"},
		{annRerouteInterfaces, "net1,,net2", "empty interface name"},
		{annKubevirtInterfaces, "net 1", "not an interface name"},
	} {
		t.Run(tc.ann+"="+tc.value, func(t *testing.T) {
			_, err := SpecFromAnnotations(redirect.DefaultSpec(), map[string]string{tc.ann: tc.value})
			var ae *AnnotationError
			if !errors.As(err, &ae) {
				t.Fatalf("got %v, want an AnnotationError", err)
			}
			if ae.Annotation != tc.ann || ae.Value != tc.value {
				t.Errorf("error names %s=%q, want %s=%q", ae.Annotation, ae.Value, tc.ann, tc.value)
			}
			if !strings.Contains(err.Error(), tc.why) || !strings.Contains(err.Error(), tc.ann) {
				t.Errorf("error %q: want it to name %s and say %q", err, tc.ann, tc.why)
			}
		})
	}
}

// FuzzSpecFromAnnotations holds the mapping to two promises: it never
// returns a Spec the redirect builder refuses (every bad value is caught
// here, where the error can name the annotation), and an error always names
// an annotation that the pod carries.
func FuzzSpecFromAnnotations(f *testing.F) {
	f.Add(uint8(1), "10.0.0.0/8,fd00::/8", uint8(3), "80,443")
	f.Add(uint8(0), "REDIRECT", uint8(7), "eth1")
	f.Add(uint8(4), "*", uint8(6), "")
	f.Add(uint8(2), "1.2.3.4/32", uint8(5), "15001")
	f.Fuzz(func(t *testing.T, k1 uint8, v1 string, k2 uint8, v2 string) {
		ann := map[string]string{
			trafficAnnotations[int(k1)%len(trafficAnnotations)]: v1,
			trafficAnnotations[int(k2)%len(trafficAnnotations)]: v2,
		}
		base := redirect.DefaultSpec()
		spec, err := SpecFromAnnotations(base, ann)
		if err != nil {
			var ae *AnnotationError
			if !errors.As(err, &ae) {
				t.Fatalf("error %v is not an AnnotationError", err)
			}
			if v, ok := ann[ae.Annotation]; !ok || v != ae.Value {
				t.Fatalf("error names %s=%q, which the pod does not carry (%v)", ae.Annotation, ae.Value, ann)
			}
			return
		}
		if _, err := redirect.Build(spec); err != nil {
			t.Fatalf("annotations %v gave a spec the builder refuses: %v", ann, err)
		}
		if !reflect.DeepEqual(base, redirect.DefaultSpec()) {
			t.Fatal("base spec was modified")
		}
	})
}
