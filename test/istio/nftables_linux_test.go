package istio

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"istio.io/istio/cni/pkg/config"
	istioipt "istio.io/istio/cni/pkg/iptables"
	"istio.io/istio/cni/pkg/plugin"
	"istio.io/istio/cni/pkg/scopes"
	"istio.io/istio/cni/pkg/trafficmanager"

	"github.com/sluicemesh/sluice/daemon/redirect"
	"github.com/sluicemesh/sluice/test/harness/nstest"
)

// Istio's nftables backend (global.nativeNftables) is a second
// implementation of the same capture: istio-cni's sidecar path hands the
// pod to istio-nftables (tools/istio-nftables/pkg/capture) instead of
// istio-iptables, and its node agent programs ambient pods with
// cni/pkg/nftables instead of cni/pkg/iptables. Both drive the nft binary
// through knftables, so they are run here as istio-cni runs them: on an OS
// thread that has entered the pod's netns, where the nft child process
// inherits that netns.

// applyIstioNft programs c into the pod as istio-cni does with
// native_nftables on: NewRedirect from the pod, then the plugin's own
// nftables rule manager, which opens the netns by path, enters it on a
// locked thread (containernetworking's ns.Do), reads the pod's addresses
// there, runs istio-nftables and its policy routes.
func (tp *trafficPod) applyIstioNft(t *testing.T, c sidecarCase) error {
	rd, err := plugin.NewRedirect(plugin.ExtractPodInfo(c.pod()))
	if err != nil {
		return fmt.Errorf("NewRedirect: %w", err)
	}
	// istioRules swaps config.LocalIPAddrs under istioMu; Program reads it.
	istioMu.Lock()
	defer istioMu.Unlock()
	if err := plugin.NftablesInterceptRuleMgr().Program(c.name, tp.pod.Path, rd); err != nil {
		return err
	}
	tp.requireIstioTables(t, "istio-proxy-nat")
	return nil
}

// requireIstioTables fails t unless the pod's netns holds the named
// tables: the proof that Istio's nft ran inside the pod, not beside it.
func (tp *trafficPod) requireIstioTables(t *testing.T, names ...string) {
	t.Helper()
	out := tp.pod.Run(t, "nft", "list", "tables")
	for _, n := range names {
		if !strings.Contains(out, "table inet "+n+"\n") {
			t.Fatalf("Istio's nftables backend left no table inet %s in the pod's netns:\n%s", n, out)
		}
	}
}

// applyIstioNftAmbient programs c's in-pod rules as istio-cni's node agent
// does with nativeNftables: its traffic manager's CreateInpodRules on a
// thread inside the pod's netns (the agent's netnsRunner), with the
// agent's pod config (ambient.ipv6 on, as Istio's chart default) and
// real netlink for the loopback route and the mark rule.
func (tp *trafficPod) applyIstioNftAmbient(t *testing.T, c ambientCase) {
	cfg := &config.AmbientConfig{RedirectDNS: c.dns, EnableIPv6: true,
		HostProbeSNATAddress: probeSNAT, HostProbeV6SNATAddress: redirect.DefaultProbeSNATIPv6}
	_, pod, err := trafficmanager.NewTrafficRuleManager(&trafficmanager.TrafficRuleManagerConfig{
		NativeNftables: true, HostConfig: cfg, PodConfig: cfg, NlDeps: istioipt.RealNlDeps(),
	})
	if err != nil {
		t.Fatal(err)
	}
	o := config.PodLevelOverrides{IngressMode: c.ingress, DNSProxy: config.PodDNSUnset}
	if c.virtualIf != "" {
		o.VirtualInterfaces = []string{c.virtualIf}
	}
	if err := tp.pod.Do(func() error { return pod.CreateInpodRules(scopes.CNIAgent, o) }); err != nil {
		t.Fatalf("istio-cni's nftables in-pod rules: %v", err)
	}
	tp.requireIstioTables(t, "istio-ambient-nat", "istio-ambient-mangle")
	if rules := tp.pod.Run(t, "ip", "rule"); !strings.Contains(rules, "fwmark 0x111/0xfff lookup 100") {
		t.Fatalf("istio-cni's in-pod mark rule is not in the pod's netns:\n%s", rules)
	}
}

// nftException is a difference between Istio's nftables backend and
// sluice that is kept on purpose: in these cases, these probes land here
// under Istio's nftables backend and there under sluice (the listener; the
// original destination must be the same on both sides). The compatibility
// doc has a row `nft-<name>` naming the same probes, with the reason. A
// run where it covers no difference fails (the difference is gone), and
// so does a covered probe landing elsewhere than it says (it changed), or
// a difference in another case or probe (it spread).
type nftException struct {
	name  string
	cases []string
	// lands maps a probe to where it lands under Istio's nftables backend
	// and under sluice.
	lands map[string][2]string
	// asIptables: Istio's own iptables backend lands each covered probe
	// where sluice does, checked on every one.
	asIptables bool
}

// covers says whether e explains the difference at key in caseName, and
// fails when it is e's probe but lands elsewhere than e says.
func (e nftException) covers(caseName, key, istio, sluice string) (bool, error) {
	want, ok := e.lands[key]
	if !ok || !slices.Contains(e.cases, caseName) {
		return false, nil
	}
	il, idst, _ := strings.Cut(istio, " for ")
	sl, sdst, _ := strings.Cut(sluice, " for ")
	if il != want[0] || sl != want[1] || idst != sdst {
		return true, fmt.Errorf("nft-%s says %s lands on %q under Istio's nftables backend and %q under sluice; now %q and %q",
			e.name, key, want[0], want[1], istio, sluice)
	}
	return true, nil
}

// nftExceptionsListed fails t unless every exception has its row in the
// compatibility doc, naming the same probes, and every nft-<prefix> row
// there is an exception of the test.
func nftExceptionsListed(t *testing.T, prefix string, exceptions []nftException) {
	t.Helper()
	known := knownDifferences(t)
	names := map[string]bool{}
	for _, e := range exceptions {
		if !strings.HasPrefix(e.name, prefix) {
			t.Errorf("exception %s: its name starts with %q", e.name, prefix)
		}
		names["nft-"+e.name] = true
		probes := make([]string, 0, len(e.lands))
		for k := range e.lands {
			probes = append(probes, k)
		}
		slices.Sort(probes)
		want := strings.Join(probes, ",")
		if got, ok := known["nft-"+e.name]; !ok || got != want {
			t.Errorf("%s: the row nft-%s must list the probes %q (it lists %q)", compatDoc, e.name, want, got)
		}
	}
	for name := range known {
		if strings.HasPrefix(name, "nft-"+prefix) && !names[name] {
			t.Errorf("%s lists %s, which is no exception of the test", compatDoc, name)
		}
	}
}

// nftVerdict compares one case's outcomes under Istio's nftables backend
// and sluice: every differing probe must be covered by an exception, and
// returns the exceptions that covered one.
func nftVerdict(t *testing.T, exceptions []nftException, caseName string, ipt, nft, sluice map[string]string) []string {
	t.Helper()
	var hit []string
	keys := sortedKeys(nft)
	for _, k := range sortedKeys(sluice) {
		if _, ok := nft[k]; !ok {
			keys = append(keys, k)
		}
	}
	for _, k := range keys {
		if nft[k] == sluice[k] {
			continue
		}
		covered := false
		for _, e := range exceptions {
			ok, err := e.covers(caseName, k, nft[k], sluice[k])
			if err != nil {
				t.Error(err)
			}
			if !ok {
				continue
			}
			covered = true
			hit = append(hit, e.name)
			if e.asIptables && ipt[k] != sluice[k] {
				t.Errorf("nft-%s says Istio's iptables backend lands %s where sluice does (%q), but it lands on %q", e.name, k, sluice[k], ipt[k])
			}
		}
		if !covered {
			t.Errorf("%s lands elsewhere under sluice than under Istio's nftables backend, and no exception covers it:\n  istio nftables: %q\n  sluice:         %q\n  istio iptables: %q",
				k, nft[k], sluice[k], ipt[k])
		}
	}
	return hit
}

// nftSidecarExceptions are the differences kept between Istio's nftables
// sidecar capture and sluice's.
var nftSidecarExceptions = []nftException{
	{
		// Istio's nftables rules live in one inet table: with IPv6 off
		// (a dual-stack pod without ISTIO_DUAL_STACK) it leaves out its
		// IPv6-only rules, but the rules that name no family (inbound
		// "meta l4proto tcp jump istio-inbound", outbound "jump
		// istio-redirect") capture IPv6 all the same. Its iptables backend
		// and sluice leave IPv6 uncaptured, for an Envoy that listens on
		// IPv4 only (TestDualStackCaptureFollowsIstio).
		name:  "sidecar-ipv6-without-dual-stack",
		cases: []string{"dual-stack", "dual-stack-flag-false", "dual-stack-flag-invalid"},
		lands: map[string][2]string{
			"in-v6":      {"proxy-in", "app"},
			"out-v6":     {"proxy-out", "peer"},
			"out-dns-v6": {"proxy-out", "peer-dns"},
		},
		asIptables: true,
	},
	{
		// Both of Istio's backends send a KubeVirt guest's TCP to the
		// inbound listener under TPROXY; sluice to the outbound one, as
		// under REDIRECT (traffic-reroute-tproxy).
		name:  "sidecar-reroute-tproxy",
		cases: []string{"reroute-tproxy"},
		lands: map[string][2]string{
			"side-in":  {"proxy-in", "proxy-out"},
			"side-out": {"proxy-in", "proxy-out"},
		},
	},
}

// TestNftablesTrafficParity programs every corpus pod that has an address
// three times, in fresh network namespaces: with Istio's iptables backend
// (istio-iptables' rules by iptables-restore), with its nftables backend
// (istio-cni's native_nftables path, running nft in the pod), and by
// sluice's ADD path; and compares where real connections land under
// Istio's nftables backend and sluice, and for which original destination
// (the probes of outcomes: per family and from the proxy's uid too,
// loopback, a second interface). Differences must be nftSidecarExceptions.
func TestNftablesTrafficParity(t *testing.T) {
	nstest.RequireRoot(t)
	nftExceptionsListed(t, "sidecar-", nftSidecarExceptions)
	var table strings.Builder
	hits := map[string]int{}
	ran := 0
	for _, c := range sidecarCorpus {
		if len(c.ips) == 0 {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			it, nt, st := newTrafficPod(t, c), newTrafficPod(t, c), newTrafficPod(t, c)
			iok := it.applyIstio(t, c)
			nerr := nt.applyIstioNft(t, c)
			sok := st.applySluice(t, c)
			if nerr != nil || !sok {
				fmt.Fprintf(&table, "%-34s | not captured: Istio nftables %v, sluice %v, Istio iptables %v\n", c.name, nerr != nil, !sok, !iok)
				if (nerr == nil) != sok {
					t.Errorf("captured under one of Istio's nftables backend (error: %v) and sluice (captures: %v) only", nerr, sok)
				}
				return
			}
			ran++
			ipt := map[string]string{}
			if iok {
				ipt = it.outcomes(c)
			}
			nft, sluice := nt.outcomes(c), st.outcomes(c)
			for _, e := range nftVerdict(t, nftSidecarExceptions, c.name, ipt, nft, sluice) {
				hits[e]++
			}
			fmt.Fprintf(&table, "%-34s | nftables %v\n%34s | sluice   %v\n%34s | iptables %v\n", c.name, nft, "", sluice, "", ipt)
		})
	}
	if ran == 0 {
		t.Fatal("no corpus case was run with traffic")
	}
	for _, e := range nftSidecarExceptions {
		if hits[e.name] == 0 {
			t.Errorf("nft-%s covers no difference any more: remove it from the test and from %s", e.name, compatDoc)
		}
	}
	t.Log("\n" + table.String())
}

// nftAmbientExceptions are the differences kept between Istio's nftables
// in-pod ambient rules and sluice's.
var nftAmbientExceptions = []nftException{}

// TestNftablesAmbientTrafficParity programs every ambient case, in an
// IPv4, an IPv6-only and a dual-stack pod, with istio-cni's iptables
// in-pod rules, with its nftables ones (its node agent's traffic manager,
// nft run inside the pod) and with sluice's ruleset, and compares where
// real connections land under Istio's nftables backend and sluice (the
// probes of ambientOutcomes). Differences must be nftAmbientExceptions.
func TestNftablesAmbientTrafficParity(t *testing.T) {
	nstest.RequireRoot(t)
	nftExceptionsListed(t, "ambient-", nftAmbientExceptions)
	var table strings.Builder
	hits := map[string]int{}
	for _, c := range ambientCorpus {
		for _, f := range families {
			name := c.name + "-" + f.name
			t.Run(name, func(t *testing.T) {
				it, nt, st := newAmbientPod(t, c, f), newAmbientPod(t, c, f), newAmbientPod(t, c, f)
				it.applyIstioAmbient(t, c)
				nt.applyIstioNftAmbient(t, c)
				st.applySluiceAmbient(t, c)
				ipt, nft, sluice := it.ambientOutcomes(f), nt.ambientOutcomes(f), st.ambientOutcomes(f)
				for _, e := range nftVerdict(t, nftAmbientExceptions, name, ipt, nft, sluice) {
					hits[e]++
				}
				fmt.Fprintf(&table, "%-20s | nftables %v\n%20s | sluice   %v\n%20s | iptables %v\n", name, nft, "", sluice, "", ipt)
			})
		}
	}
	for _, e := range nftAmbientExceptions {
		if hits[e.name] == 0 {
			t.Errorf("nft-%s covers no difference any more: remove it from the test and from %s", e.name, compatDoc)
		}
	}
	t.Log("\n" + table.String())
}
