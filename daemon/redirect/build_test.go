package redirect

import (
	"encoding/json"
	"flag"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sluicemesh/sluice/daemon/redirect/nft"
)

var update = flag.Bool("update", false, "rewrite testdata/*.nft from the current builder")

func TestGolden(t *testing.T) {
	for name, spec := range Examples() {
		t.Run(name, func(t *testing.T) {
			r, err := Build(spec)
			if err != nil {
				t.Fatalf("Build: %v", err)
			}
			checkGolden(t, name, r.Render())
		})
	}
}

func TestGoldenHost(t *testing.T) {
	kubelet, none := DefaultHostConfig(), DefaultHostConfig()
	kubelet.ProbeUID, none.ProbeUID = UIDOf(4242), UID{}
	for name, cfg := range map[string]HostConfig{
		"host":             DefaultHostConfig(),
		"host-ipv4-only":   {ProbeSNATIPv4: DefaultProbeSNATIPv4, IPv4: true, ProbeUID: UIDOf(0)},
		"host-kubelet-uid": kubelet,
		"host-no-kubelet":  none,
	} {
		t.Run(name, func(t *testing.T) {
			r, err := BuildHost(cfg)
			if err != nil {
				t.Fatal(err)
			}
			checkGolden(t, name, r.Render())
		})
	}
	if _, err := BuildHost(HostConfig{IPv6: true, ProbeSNATIPv6: DefaultProbeSNATIPv4}); err == nil {
		t.Error("BuildHost took an IPv4 address for IPv6")
	}
}

func checkGolden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".nft")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./daemon/redirect -update)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs from Render (run with -update if intended)\ngot:\n%s\nwant:\n%s", path, got, want)
	}
}

func TestBuildDeterministic(t *testing.T) {
	a, err := Build(Examples()["outbound-cidrs"])
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Build(Examples()["outbound-cidrs"])
	if a.Hash() != b.Hash() || len(a.Hash()) != 64 {
		t.Errorf("hashes %q and %q: want equal sha256 hex", a.Hash(), b.Hash())
	}
	c, _ := Build(DefaultSpec())
	if c.Hash() == a.Hash() {
		t.Error("different specs hash the same")
	}
}

func TestTagsUnique(t *testing.T) {
	for name, spec := range Examples() {
		r, err := Build(spec)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for _, c := range r.table.Chains {
			for _, rl := range c.Rules {
				if seen[rl.Tag] {
					t.Errorf("%s: tag %q used twice", name, rl.Tag)
				}
				seen[rl.Tag] = true
			}
		}
	}
}

func TestBuildRejects(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Spec)
		want string
	}{
		{"zero outbound port", func(s *Spec) { s.OutboundPort = 0 }, "OutboundPort is 0"},
		{"zero inbound port", func(s *Spec) { s.InboundPort = 0 }, "InboundPort is 0"},
		{"zero dns port", func(s *Spec) { s.CaptureDNS, s.DNSPort = true, 0 }, "DNSPort is 0"},
		{"port 0 in list", func(s *Spec) { s.ExcludeOutboundPorts = []uint16{80, 0} }, "ExcludeOutboundPorts contains port 0"},
		{"no family", func(s *Spec) { s.IPv4, s.IPv6 = false, false }, "neither IPv4 nor IPv6"},
		{"v6 cidr with v6 off", func(s *Spec) { s.IPv6 = false; s.ExcludeOutboundCIDRs = prefixes("fd00::/8") }, "IPv6 capture is off"},
		{"v4 cidr with v4 off", func(s *Spec) { s.IPv4 = false; s.IncludeOutboundCIDRs = prefixes("10.0.0.0/8") }, "IPv4 capture is off"},
		{"mapped cidr", func(s *Spec) { s.ExcludeOutboundCIDRs = prefixes("::ffff:10.0.0.0/104") }, "IPv4-mapped"},
		{"invalid cidr", func(s *Spec) { s.ExcludeOutboundCIDRs = []netip.Prefix{{}} }, "invalid prefix"},
		{"empty interface", func(s *Spec) { s.ExcludeInterfaces = []string{""} }, "empty name"},
		{"long interface", func(s *Spec) { s.ExcludeInterfaces = []string{"abcdefghijklmnop"} }, "longer than 15"},
		{"bad interface", func(s *Spec) { s.ExcludeInterfaces = []string{"a b"} }, "not a valid interface name"},
		{"mode", func(s *Spec) { s.Mode = "gateway" }, `mode "gateway": want "sidecar" or "ambient"`},
		{"interception", func(s *Spec) { s.Interception = "NONE" }, `want "REDIRECT" or "TPROXY"`},
		{"no inbound ports and a list", func(s *Spec) { s.IncludeNoInboundPorts, s.IncludeInboundPorts = true, []uint16{80} }, "IncludeNoInboundPorts is set"},
		{"no outbound cidrs and a list", func(s *Spec) { s.IncludeNoOutboundCIDRs, s.IncludeOutboundCIDRs = true, prefixes("10.0.0.0/8") }, "IncludeNoOutboundCIDRs is set"},
		{"tproxy main table", func(s *Spec) { s.Interception, s.RouteTable = InterceptTProxy, 254 }, "kernel's main table"},
		{"tproxy mark outside mask", func(s *Spec) { s.Interception, s.RouteMarkMask = InterceptTProxy, 0xff }, "outside RouteMarkMask"},
		{"tproxy priority", func(s *Spec) { s.Interception, s.RoutePriority = InterceptTProxy, 32766 }, "RoutePriority 32766"},
		{"passthrough family", func(s *Spec) { s.InboundPassthroughIPv4 = netip.MustParseAddr("::6") }, "InboundPassthroughIPv4"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := DefaultSpec()
			tc.edit(&s)
			_, err := Build(s)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Build: %v, want error containing %q", err, tc.want)
			}
		})
	}
}

func TestBuildRejectsAmbient(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Spec)
		want string
	}{
		{"interception", func(s *Spec) { s.Interception = "NONE" }, `interception "NONE"`},
		{"sidecar list", func(s *Spec) { s.ExcludeOutboundPorts = []uint16{22} }, "ExcludeOutboundPorts is a sidecar setting"},
		{"marks clash", func(s *Spec) { s.RouteMark = 0x539 }, "matches ZtunnelMark"},
		{"no ztunnel mark", func(s *Spec) { s.ZtunnelMark = 0 }, "ZtunnelMark 0x0/0xfff"},
		{"probe family", func(s *Spec) { s.ProbeSNATIPv6 = DefaultProbeSNATIPv4 }, "ProbeSNATIPv6"},
		{"hbone port", func(s *Spec) { s.HBONEPort = 0 }, "HBONEPort is 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := DefaultAmbientSpec()
			tc.edit(&s)
			_, err := Build(s)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Build: %v, want error containing %q", err, tc.want)
			}
		})
	}
}

// TestSpecJSONCompatible: a Spec journaled before the TPROXY, ambient and
// capture-nothing fields existed loads into the same ruleset.
func TestSpecJSONCompatible(t *testing.T) {
	old := `{"Mode":"sidecar","Interception":"REDIRECT","ProxyUID":1337,"ProxyGID":1337,"OutboundPort":15001,` +
		`"InboundPort":15006,"HBONEPort":15008,"InboundPassthroughIPv4":"127.0.0.6","InboundPassthroughIPv6":"::6",` +
		`"InboundPassPorts":[15008,15020,15021,15090],"IncludeInboundPorts":null,"ExcludeInboundPorts":null,` +
		`"IncludeOutboundPorts":null,"ExcludeOutboundPorts":null,"IncludeOutboundCIDRs":null,"ExcludeOutboundCIDRs":null,` +
		`"ExcludeInterfaces":null,"CaptureDNS":false,"DNSPort":15053,"IPv4":true,"IPv6":true}`
	var s Spec
	if err := json.Unmarshal([]byte(old), &s); err != nil {
		t.Fatal(err)
	}
	got, err := Build(s)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := Build(DefaultSpec())
	if got.Hash() != want.Hash() {
		t.Errorf("old journal builds\n%s\nwant\n%s", got.Render(), want.Render())
	}
	// And every Spec survives a round trip.
	for name, spec := range Examples() {
		data, err := json.Marshal(spec)
		if err != nil {
			t.Fatal(err)
		}
		var back Spec
		if err := json.Unmarshal(data, &back); err != nil {
			t.Fatal(err)
		}
		a, _ := Build(spec)
		b, err := Build(back)
		if err != nil || a.Hash() != b.Hash() {
			t.Errorf("%s: round trip through %s: %v", name, data, err)
		}
	}
}

func TestBuildReportsAllProblems(t *testing.T) {
	s := DefaultSpec()
	s.OutboundPort, s.InboundPort = 0, 0
	_, err := Build(s)
	if err == nil || !strings.Contains(err.Error(), "OutboundPort") || !strings.Contains(err.Error(), "InboundPort") {
		t.Errorf("Build: %v, want both port errors", err)
	}
}

func TestNormalisePrefixes(t *testing.T) {
	got := normalisePrefixes(nft.IPv4, prefixes("10.1.2.3/16", "10.0.0.0/8", "192.168.0.0/24", "fd00::/8", "11.0.0.0/8"))
	want := prefixes("10.0.0.0/8", "11.0.0.0/8", "192.168.0.0/24")
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("got %v, want %v", got, want)
		}
	}
}

// TestInboundPassPortsExact: the inbound chains pass exactly the ports
// policy lists, in both interception modes; HBONE has no special case
// there (Istio captures 15008 in TPROXY mode, and policy says so by
// leaving it out of the list).
func TestInboundPassPortsExact(t *testing.T) {
	for _, mode := range []Interception{InterceptRedirect, InterceptTProxy} {
		s := DefaultSpec()
		s.Interception = mode
		s.InboundPassPorts = []uint16{15020}
		r, err := Build(s)
		if err != nil {
			t.Fatal(err)
		}
		var inbound []string
		for _, c := range r.table.Chains {
			if c.Name == chainInbound || c.Name == chainPrerouting || c.Name == chainTProxy {
				for _, rule := range c.Rules {
					inbound = append(inbound, rule.Tag)
				}
			}
		}
		text := r.Render()
		if strings.Contains(text, "15008, ") || strings.Contains(text, "elements = { 15008") {
			t.Errorf("%s: 15008 passes though policy left it out:\n%s", mode, text)
		}
		if !strings.Contains(text, "elements = { 15020 }") || !slices.Contains(inbound, "inbound-pass-ports") {
			t.Errorf("%s: the listed pass port is not passed (rules %v):\n%s", mode, inbound, text)
		}
	}
}
