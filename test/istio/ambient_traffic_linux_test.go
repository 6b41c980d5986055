package istio

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"istio.io/istio/cni/pkg/config"
	istioipt "istio.io/istio/cni/pkg/iptables"

	"github.com/sluicemesh/sluice/daemon/redirect"
	"github.com/sluicemesh/sluice/daemon/redirect/kernel"
	"github.com/sluicemesh/sluice/internal/nstest"
)

// ambientCase is one ambient pod: Istio's per-pod overrides and the same
// options in sluice's Spec.
type ambientCase struct {
	name      string
	dns       bool
	ingress   bool   // ambient.istio.io/bypass-inbound-capture
	virtualIf string // istio.io/reroute-virtual-interfaces
}

var ambientCorpus = []ambientCase{
	{name: "default"},
	{name: "dns", dns: true},
	{name: "bypass-inbound", ingress: true},
	{name: "reroute", virtualIf: "net1"},
}

var probeSNAT = netip.MustParseAddr("169.254.7.127")

// istioAmbientRules are istio-cni's in-pod ambient rules for c (IPv4), as
// its node agent feeds them to iptables-restore.
func istioAmbientRules(t *testing.T, c ambientCase) string {
	cfg := &config.AmbientConfig{RedirectDNS: c.dns, HostProbeSNATAddress: probeSNAT,
		HostProbeV6SNATAddress: redirect.DefaultProbeSNATIPv6}
	_, inpod, err := istioipt.NewIptablesConfigurator(cfg, cfg, &recorder{}, &recorder{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	o := config.PodLevelOverrides{IngressMode: c.ingress, DNSProxy: config.PodDNSUnset}
	if c.virtualIf != "" {
		o.VirtualInterfaces = []string{c.virtualIf}
	}
	return inpod.AppendInpodRules(o).BuildV4Restore()
}

func sluiceAmbientSpec(c ambientCase) redirect.Spec {
	s := redirect.DefaultAmbientSpec()
	s.CaptureDNS, s.BypassInboundCapture, s.IPv6 = c.dns, c.ingress, false
	if c.virtualIf != "" {
		s.RerouteInterfaces = []string{c.virtualIf}
	}
	return s
}

// newAmbientPod is a pod with ztunnel's listeners (15001 outbound, 15006
// inbound plaintext, 15008 HBONE, 15053 DNS) and an app on 8080; a peer
// that also owns the probe SNAT address (as the host side would make a
// kubelet probe's source), with a server on 8080 and 53.
func newAmbientPod(t *testing.T, c ambientCase) *trafficPod {
	tp := &trafficPod{root: t.TempDir(), landed: make(chan string, 16)}
	tp.pod, tp.peer = nstest.NewIn(t, tp.root, "pod"), nstest.New(t, "peer")
	nstest.Veth(t, tp.pod, "eth0", []string{"10.0.0.5/24"}, tp.peer, "eth0", []string{"10.0.0.6/24", probeSNAT.String() + "/32"})
	tp.pod.Run(t, "ip", "route", "add", probeSNAT.String()+"/32", "dev", "eth0")
	if c.virtualIf != "" {
		tp.side = nstest.New(t, "side")
		nstest.Veth(t, tp.pod, c.virtualIf, []string{"10.1.0.1/24"}, tp.side, "eth0", []string{"10.1.0.2/24"})
		tp.side.Run(t, "ip", "route", "add", "default", "via", "10.1.0.1")
	}
	for port, label := range map[string]string{"15001": "ztunnel-out", "15006": "ztunnel-in", "15008": "hbone", "15053": "ztunnel-dns", "8080": "app"} {
		tp.listen(t, tp.pod, ":"+port, label)
	}
	tp.listen(t, tp.peer, ":8080", "peer")
	tp.listen(t, tp.peer, ":53", "peer-dns")
	return tp
}

// dialFrom connects from ns with source address src.
func (tp *trafficPod) dialFrom(ns *nstest.NS, src, addr string) string {
	var c net.Conn
	err := ns.Do(func() (err error) {
		d := net.Dialer{Timeout: time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
		c, err = d.Dial("tcp4", addr)
		return err
	})
	if err != nil {
		return "not connected"
	}
	defer c.Close()
	select {
	case l := <-tp.landed:
		return l
	case <-time.After(2 * time.Second):
		return "connected, no listener accepted"
	}
}

func (tp *trafficPod) ambientOutcomes() map[string]string {
	out := map[string]string{
		"out":        tp.dial(tp.pod, "tcp4", "10.0.0.6:8080"),
		"out-dns":    tp.dial(tp.pod, "tcp4", "10.0.0.6:53"),
		"in":         tp.dial(tp.peer, "tcp4", "10.0.0.5:8080"),
		"in-hbone":   tp.dial(tp.peer, "tcp4", "10.0.0.5:15008"),
		"in-probe":   tp.dialFrom(tp.peer, probeSNAT.String(), "10.0.0.5:8080"),
		"in-from-lo": tp.dial(tp.pod, "tcp4", "127.0.0.1:8080"),
	}
	if tp.side != nil {
		out["side-out"] = tp.dial(tp.side, "tcp4", "10.96.0.10:80")
	}
	return out
}

// TestAmbientTrafficParity programs istio-cni's own in-pod ambient rules
// (iptables) into one pod and sluice's into another, and compares where
// real connections land: ztunnel's outbound, inbound, HBONE or DNS
// listener, the app, the peer, or nowhere. Differences are listed in the
// compatibility doc as ambient-<case>.
func TestAmbientTrafficParity(t *testing.T) {
	nstest.RequireRoot(t)
	known := knownDifferences(t)
	var table strings.Builder
	for _, c := range ambientCorpus {
		t.Run(c.name, func(t *testing.T) {
			it, st := newAmbientPod(t, c), newAmbientPod(t, c)
			rules := istioAmbientRules(t, c)
			cmd := it.pod.Command("iptables-restore", "--noflush")
			cmd.Stdin = strings.NewReader(rules)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("iptables-restore in the pod: %v\n%s\n%s", err, out, rules)
			}
			rs, err := redirect.Build(sluiceAmbientSpec(c))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := (kernel.Netlink{}).Apply(redirect.Netns(st.pod.Handle(t)), rs); err != nil {
				t.Fatal(err)
			}
			istio, sluice := it.ambientOutcomes(), st.ambientOutcomes()
			var d []string
			for _, k := range sortedKeys(istio) {
				if istio[k] != sluice[k] {
					d = append(d, k)
				}
			}
			fmt.Fprintf(&table, "%-16s | %v | %v\n", c.name, istio, sluice)
			want, listed := known["ambient-"+c.name]
			got := strings.Join(d, ",")
			switch {
			case len(d) > 0 && want != got:
				t.Errorf("connections land elsewhere under sluice than under istio-cni (%s), and %s lists %q:\n  istio:  %v\n  sluice: %v",
					got, compatDoc, want, istio, sluice)
			case len(d) == 0 && listed:
				t.Errorf("%s lists ambient-%s, but the connections land alike: remove the row", compatDoc, c.name)
			}
		})
	}
	t.Log("\n" + table.String())
}
