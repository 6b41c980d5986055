package istio

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"istio.io/istio/cni/pkg/config"
	istioipt "istio.io/istio/cni/pkg/iptables"

	"github.com/sluicemesh/sluice/daemon/redirect"
	"github.com/sluicemesh/sluice/daemon/redirect/kernel"
	"github.com/sluicemesh/sluice/test/harness/nstest"
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

// family is which addresses a pod has.
type family struct {
	name   string
	v4, v6 bool
}

var families = []family{{"v4", true, false}, {"v6", false, true}, {"dual", true, true}}

// istioAmbientRules are istio-cni's in-pod ambient rules for c, as its
// node agent feeds them to iptables-restore and ip6tables-restore, with
// ambient.ipv6 on (Istio's chart default).
func istioAmbientRules(t *testing.T, c ambientCase) (v4, v6 string) {
	cfg := &config.AmbientConfig{RedirectDNS: c.dns, EnableIPv6: true, HostProbeSNATAddress: probeSNAT,
		HostProbeV6SNATAddress: redirect.DefaultProbeSNATIPv6}
	_, inpod, err := istioipt.NewIptablesConfigurator(cfg, cfg, &recorder{}, &recorder{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	o := config.PodLevelOverrides{IngressMode: c.ingress, DNSProxy: config.PodDNSUnset}
	if c.virtualIf != "" {
		o.VirtualInterfaces = []string{c.virtualIf}
	}
	b := inpod.AppendInpodRules(o)
	return b.BuildV4Restore(), b.BuildV6Restore()
}

// applyIstioAmbient loads istio-cni's iptables in-pod rules for c.
func (tp *trafficPod) applyIstioAmbient(t *testing.T, c ambientCase) {
	v4, v6 := istioAmbientRules(t, c)
	for _, r := range []struct{ bin, text string }{{"iptables-restore", v4}, {"ip6tables-restore", v6}} {
		cmd := tp.pod.Command(r.bin, "--noflush")
		cmd.Stdin = strings.NewReader(r.text)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s in the pod: %v\n%s\n%s", r.bin, err, out, r.text)
		}
	}
}

// sluiceAmbientSpec is sluice's default ambient Spec (both families, as
// Istio's ambient.ipv6) with c's options.
func sluiceAmbientSpec(c ambientCase) redirect.Spec {
	s := redirect.DefaultAmbientSpec()
	s.CaptureDNS, s.BypassInboundCapture = c.dns, c.ingress
	if c.virtualIf != "" {
		s.RerouteInterfaces = []string{c.virtualIf}
	}
	return s
}

// applySluiceAmbient applies sluice's ruleset for c.
func (tp *trafficPod) applySluiceAmbient(t *testing.T, c ambientCase) {
	rs, err := redirect.Build(sluiceAmbientSpec(c))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := (kernel.Netlink{}).Apply(redirect.Netns(tp.pod.Handle(t)), rs); err != nil {
		t.Fatal(err)
	}
}

// newAmbientPod is a pod with f's addresses, ztunnel's listeners (15001
// outbound, 15006 inbound plaintext, 15008 HBONE, 15053 DNS) and an app on
// 8080; a peer that also owns the probe SNAT addresses (as the host side
// would make a kubelet probe's source), with a server on 8080 and 53.
func newAmbientPod(t *testing.T, c ambientCase, f family) *trafficPod {
	tp := &trafficPod{root: t.TempDir(), landed: make(chan string, 16)}
	tp.pod, tp.peer = nstest.NewIn(t, tp.root, "pod"), nstest.New(t, "peer")
	var podAddrs, peerAddrs []string
	if f.v4 {
		podAddrs, peerAddrs = append(podAddrs, "10.0.0.5/24"), append(peerAddrs, "10.0.0.6/24", probeSNAT.String()+"/32")
	}
	if f.v6 {
		podAddrs, peerAddrs = append(podAddrs, "fd00::5/64"), append(peerAddrs, "fd00::6/64", redirect.DefaultProbeSNATIPv6.String()+"/128")
	}
	nstest.Veth(t, tp.pod, "eth0", podAddrs, tp.peer, "eth0", peerAddrs)
	if f.v4 {
		tp.pod.Run(t, "ip", "route", "add", probeSNAT.String()+"/32", "dev", "eth0")
	}
	if f.v6 {
		tp.pod.Run(t, "ip", "-6", "route", "add", redirect.DefaultProbeSNATIPv6.String()+"/128", "dev", "eth0")
	}
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
		c, err = d.Dial("tcp", addr)
		return err
	})
	return tp.landing(c, err)
}

// dialMarked connects from ns with ztunnel's socket mark, as ztunnel's own
// outbound connections carry it.
func (tp *trafficPod) dialMarked(ns *nstest.NS, addr string) string {
	var c net.Conn
	err := ns.Do(func() (err error) {
		d := net.Dialer{Timeout: time.Second, Control: func(_, _ string, rc syscall.RawConn) error {
			var serr error
			err := rc.Control(func(fd uintptr) {
				serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_MARK, int(redirect.DefaultAmbientSpec().ZtunnelMark))
			})
			return errors.Join(err, serr)
		}}
		c, err = d.Dial("tcp", addr)
		return err
	})
	return tp.landing(c, err)
}

// addrs are the test's addresses of one family: the pod's, the peer's, the
// probe SNAT source and loopback.
type addrs struct{ pod, peer, probe, lo string }

var (
	addrsV4 = addrs{"10.0.0.5", "10.0.0.6", probeSNAT.String(), "127.0.0.1"}
	addrsV6 = addrs{"fd00::5", "fd00::6", redirect.DefaultProbeSNATIPv6.String(), "::1"}
)

// ambientOutcomes dials, per family of f: outbound to the peer, DNS over
// TCP, inbound, inbound HBONE, a kubelet probe from the SNAT address, the
// pod's own address, outbound with ztunnel's mark; loopback in both families (lo has both whatever the
// pod's addresses); a guest's outbound through the reroute interface.
func (tp *trafficPod) ambientOutcomes(f family) map[string]string {
	out := map[string]string{
		"lo-v4": tp.dial(tp.pod, "tcp4", "127.0.0.1:8080"),
		"lo-v6": tp.dial(tp.pod, "tcp6", "[::1]:8080"),
	}
	for _, fa := range []struct {
		on   bool
		name string
		a    addrs
	}{{f.v4, "v4", addrsV4}, {f.v6, "v6", addrsV6}} {
		if !fa.on {
			continue
		}
		hp := func(host, port string) string { return net.JoinHostPort(host, port) }
		out["out-"+fa.name] = tp.dial(tp.pod, "tcp", hp(fa.a.peer, "8080"))
		out["out-dns-"+fa.name] = tp.dial(tp.pod, "tcp", hp(fa.a.peer, "53"))
		out["in-"+fa.name] = tp.dial(tp.peer, "tcp", hp(fa.a.pod, "8080"))
		out["in-hbone-"+fa.name] = tp.dial(tp.peer, "tcp", hp(fa.a.pod, "15008"))
		out["in-probe-"+fa.name] = tp.dialFrom(tp.peer, fa.a.probe, hp(fa.a.pod, "8080"))
		out["self-"+fa.name] = tp.dial(tp.pod, "tcp", hp(fa.a.pod, "8080"))
		out["ztunnel-out-"+fa.name] = tp.dialMarked(tp.pod, hp(fa.a.peer, "8080"))
	}
	if tp.side != nil {
		out["side-out"] = tp.dial(tp.side, "tcp4", "10.96.0.10:80")
	}
	return out
}

// TestAmbientTrafficParity programs istio-cni's own in-pod ambient rules
// (iptables, both families) into one pod and sluice's into another, in an
// IPv4, an IPv6-only and a dual-stack pod, and compares where real
// connections land: ztunnel's outbound, inbound, HBONE or DNS listener,
// the app, the peer, or nowhere. Differences are listed in the
// compatibility doc as ambient-<case>-<family>.
func TestAmbientTrafficParity(t *testing.T) {
	nstest.RequireRoot(t)
	known := knownDifferences(t)
	var table strings.Builder
	for _, c := range ambientCorpus {
		for _, f := range families {
			name := c.name + "-" + f.name
			t.Run(name, func(t *testing.T) {
				it, st := newAmbientPod(t, c, f), newAmbientPod(t, c, f)
				it.applyIstioAmbient(t, c)
				st.applySluiceAmbient(t, c)
				istio, sluice := it.ambientOutcomes(f), st.ambientOutcomes(f)
				var d []string
				for _, k := range sortedKeys(istio) {
					if istio[k] != sluice[k] {
						d = append(d, k)
					}
				}
				fmt.Fprintf(&table, "%-20s | %v | %v\n", name, istio, sluice)
				want, listed := known["ambient-"+name]
				got := strings.Join(d, ",")
				switch {
				case len(d) > 0 && want != got:
					t.Errorf("connections land elsewhere under sluice than under istio-cni (%s), and %s lists %q:\n  istio:  %v\n  sluice: %v",
						got, compatDoc, want, istio, sluice)
				case len(d) == 0 && listed:
					t.Errorf("%s lists ambient-%s, but the connections land alike: remove the row", compatDoc, name)
				}
			})
		}
	}
	t.Log("\n" + table.String())
}
