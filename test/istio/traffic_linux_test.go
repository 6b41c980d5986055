package istio

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"istio.io/istio/tools/common/tproxy"

	"github.com/sluicemesh/sluice/daemon/podns"
	"github.com/sluicemesh/sluice/daemon/policy"
	"github.com/sluicemesh/sluice/daemon/redirect"
	"github.com/sluicemesh/sluice/daemon/redirect/kernel"
	"github.com/sluicemesh/sluice/internal/origdst"
	"github.com/sluicemesh/sluice/test/harness/nstest"
)

// trafficCase says whether c's capture depends on the pod's IP families or
// on its interfaces, which the Spec comparison cannot see the effect of.
func trafficCase(c sidecarCase) bool {
	if len(c.ips) == 0 {
		return false
	}
	_, exIf := c.ann[annExIfaces]
	_, reroute := c.ann[annReroute]
	_, kubevirt := c.ann[annKubevirt]
	return exIf || reroute || kubevirt || slices6(c.ips) || strings.EqualFold(c.ann[annMode], "TPROXY")
}

func slices6(ips []netip.Addr) bool {
	for _, ip := range ips {
		if ip.Is6() {
			return true
		}
	}
	return false
}

// sideIf is the pod's second interface in c: the one its annotations name.
func sideIf(c sidecarCase) string {
	for _, k := range []string{annReroute, annKubevirt, annExIfaces} {
		if v, ok := c.ann[k]; ok {
			if f := strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == ' ' }); len(f) > 0 {
				return f[0]
			}
		}
	}
	return ""
}

// trafficPod is one run: the pod, the peer on eth0, and a guest or
// neighbour on the side interface, with listeners that say which one a
// connection reached.
type trafficPod struct {
	root            string
	pod, peer, side *nstest.NS
	landed          chan string
}

func newTrafficPod(t *testing.T, c sidecarCase) *trafficPod {
	tp := &trafficPod{root: t.TempDir(), landed: make(chan string, 16)}
	tp.pod, tp.peer = nstest.NewIn(t, tp.root, "pod"), nstest.New(t, "peer")
	var podAddrs, peerAddrs []string
	for _, ip := range c.ips {
		if ip.Is4() {
			podAddrs, peerAddrs = append(podAddrs, "10.0.0.5/24"), append(peerAddrs, "10.0.0.6/24")
		} else {
			podAddrs, peerAddrs = append(podAddrs, "fd00::5/64"), append(peerAddrs, "fd00::6/64")
		}
	}
	nstest.Veth(t, tp.pod, "eth0", podAddrs, tp.peer, "eth0", peerAddrs)
	if name := sideIf(c); name != "" && len(name) <= 15 && !strings.ContainsAny(name, " ") {
		tp.side = nstest.New(t, "side")
		nstest.Veth(t, tp.pod, name, []string{"10.1.0.1/24"}, tp.side, "eth0", []string{"10.1.0.2/24"})
		tp.side.Run(t, "ip", "route", "add", "default", "via", "10.1.0.1")
	}
	tp.listen(t, tp.pod, ":15001", "proxy-out")
	tp.listen(t, tp.pod, ":8080", "app")
	if strings.EqualFold(c.ann[annMode], "TPROXY") {
		// Envoy's TPROXY inbound listener is transparent; TPROXY finds no
		// other socket.
		tp.listenTransparent(t, tp.pod, ":15006", "proxy-in")
	} else {
		tp.listen(t, tp.pod, ":15006", "proxy-in")
	}
	tp.listen(t, tp.pod, ":15053", "proxy-dns")
	tp.listen(t, tp.peer, ":8080", "peer")
	tp.listen(t, tp.peer, ":53", "peer-dns")
	return tp
}

func (tp *trafficPod) listen(t *testing.T, ns *nstest.NS, addr, label string) {
	tp.listenWith(t, ns, net.ListenConfig{}, addr, label)
}

// listenTransparent listens with IP_TRANSPARENT and IPV6_TRANSPARENT set,
// as Envoy's inbound listener does in TPROXY mode.
func (tp *trafficPod) listenTransparent(t *testing.T, ns *nstest.NS, addr, label string) {
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			if serr = unix.SetsockoptInt(int(fd), unix.SOL_IP, unix.IP_TRANSPARENT, 1); serr == nil {
				serr = unix.SetsockoptInt(int(fd), unix.SOL_IPV6, unix.IPV6_TRANSPARENT, 1)
			}
		})
		return errors.Join(err, serr)
	}}
	tp.listenWith(t, ns, lc, addr, label)
}

func (tp *trafficPod) listenWith(t *testing.T, ns *nstest.NS, lc net.ListenConfig, addr, label string) {
	t.Helper()
	var l net.Listener
	if err := ns.Do(func() (err error) { l, err = lc.Listen(context.Background(), "tcp", addr); return err }); err != nil {
		t.Fatalf("listen %s in %s: %v", addr, ns.Name, err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			dst := originalDst(c.(*net.TCPConn))
			c.Close()
			tp.landed <- label + " for " + dst
		}
	}()
}

// originalDst is where the client meant to go, as a proxy learns it: what
// conntrack recorded before a nat REDIRECT, else (TPROXY, or a connection
// that was not rewritten and has no conntrack entry) the socket's own
// local address.
func originalDst(c *net.TCPConn) string {
	if d, err := origdst.Get(c); err == nil {
		return d.String()
	}
	return netip.MustParseAddrPort(c.LocalAddr().String()).String()
}

// dial says where a connection from ns to addr lands, or that it does not.
func (tp *trafficPod) dial(ns *nstest.NS, network, addr string) string {
	c, err := ns.Dial(network, addr, time.Second)
	return tp.landing(c, err)
}

// proxyUID is the uid (and gid) of Istio's proxy by default, which every
// backend exempts from outbound capture.
const proxyUID = 1337

// dialAs is dial from a socket that uid and gid own, as the proxy's are:
// the owner match reads the socket's owner, which the kernel takes from
// the creating thread's filesystem ids. Those are set on nstest's thread
// alone (a raw per-thread syscall), which is discarded afterwards.
func (tp *trafficPod) dialAs(ns *nstest.NS, uid int, addr string) string {
	var c net.Conn
	err := ns.Do(func() (err error) {
		unix.SetfsgidRetGid(uid)
		unix.SetfsuidRetUid(uid)
		// -1 changes nothing and returns the current id.
		g, _ := unix.SetfsgidRetGid(-1)
		u, _ := unix.SetfsuidRetUid(-1)
		if g != uid || u != uid {
			return fmt.Errorf("filesystem ids %d/%d, want %d", u, g, uid)
		}
		c, err = net.DialTimeout("tcp", addr, time.Second)
		return err
	})
	return tp.landing(c, err)
}

// landing says where the connection c (dialled with err) landed.
func (tp *trafficPod) landing(c net.Conn, err error) string {
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

// outcomes dials every probe c's topology has and says where each landed:
// per family of the pod, outbound to the peer, DNS over TCP to it, inbound
// from it and to the pod's own address; loopback in both families (lo has
// both whatever the pod's addresses); the same as the proxy's uid
// (proxy-*: exempt outbound, its calls to the pod's own address go to the
// inbound listener); inbound from the second interface and a guest's
// outbound through it.
func (tp *trafficPod) outcomes(c sidecarCase) map[string]string {
	out := map[string]string{
		"lo-v4":       tp.dial(tp.pod, "tcp4", "127.0.0.1:8080"),
		"lo-v6":       tp.dial(tp.pod, "tcp6", "[::1]:8080"),
		"proxy-lo-v4": tp.dialAs(tp.pod, proxyUID, "127.0.0.1:8080"),
		"proxy-lo-v6": tp.dialAs(tp.pod, proxyUID, "[::1]:8080"),
	}
	for _, ip := range c.ips {
		f, a := "v4", addrsV4
		if ip.Is6() {
			f, a = "v6", addrsV6
		}
		out["out-"+f] = tp.dial(tp.pod, "tcp", net.JoinHostPort(a.peer, "8080"))
		out["out-dns-"+f] = tp.dial(tp.pod, "tcp", net.JoinHostPort(a.peer, "53"))
		out["in-"+f] = tp.dial(tp.peer, "tcp", net.JoinHostPort(a.pod, "8080"))
		out["self-"+f] = tp.dial(tp.pod, "tcp", net.JoinHostPort(a.pod, "8080"))
		out["proxy-out-"+f] = tp.dialAs(tp.pod, proxyUID, net.JoinHostPort(a.peer, "8080"))
		out["proxy-dns-"+f] = tp.dialAs(tp.pod, proxyUID, net.JoinHostPort(a.peer, "53"))
		out["proxy-self-"+f] = tp.dialAs(tp.pod, proxyUID, net.JoinHostPort(a.pod, "8080"))
	}
	if tp.side != nil {
		out["side-in"] = tp.dial(tp.side, "tcp4", "10.1.0.1:8080")
		out["side-out"] = tp.dial(tp.side, "tcp4", "10.96.0.10:80")
	}
	return out
}

// applyIstio programs istio-iptables' own rules for c into the pod, with
// iptables-restore, as istio-cni does.
func (tp *trafficPod) applyIstio(t *testing.T, c sidecarCase) bool {
	v4, v6, cfg, err := istioRules(c.pod(), c.ips)
	if err != nil || badPort(append(parseRestore(v4), parseRestore(v6)...)) != nil {
		return false
	}
	// The TPROXY policy routes (and IPv6's ::6 on lo), by Istio's own code,
	// as istio-cni sets them up in the pod.
	if err := tp.pod.Do(func() error { return tproxy.ConfigureRoutes(cfg) }); err != nil {
		t.Fatalf("istio's routes in the pod: %v", err)
	}
	for _, r := range []struct{ bin, text string }{{"iptables-restore", v4}, {"ip6tables-restore", v6}} {
		if r.text == "" {
			continue
		}
		cmd := tp.pod.Command(r.bin)
		cmd.Stdin = strings.NewReader(r.text)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s in the pod: %v\n%s\n%s", r.bin, err, out, r.text)
		}
	}
	return true
}

// applySluice runs sluice's ADD path as a runtime that gives no IPs does
// (an own conflist under Multus) before the pod's status has any: the
// addresses are read from the netns, then policy, builder and netlink.
func (tp *trafficPod) applySluice(t *testing.T, c sidecarCase) bool {
	o, err := podns.NewOpener([]string{tp.root}, "/proc")
	if err != nil {
		t.Fatal(err)
	}
	prefixes, err := o.Addrs(t.Context(), tp.pod.Path)
	if err != nil {
		t.Fatal(err)
	}
	var ips []netip.Addr
	for _, p := range prefixes {
		ips = append(ips, p.Addr())
	}
	d, err := policy.Rules{Sidecar: redirect.DefaultSpec()}.Decide(c.pod(), nil, ips)
	if err != nil || !d.Capture {
		return false
	}
	rs, err := redirect.Build(d.Spec)
	if err != nil {
		return false
	}
	if _, err := (kernel.Netlink{}).Apply(redirect.Netns(tp.pod.Handle(t)), rs); err != nil {
		t.Fatal(err)
	}
	return true
}

// TestTrafficParity programs each corpus pod whose capture depends on its
// IP families or interfaces with Istio's own iptables rules in one set of
// namespaces and with sluice's (learning the pod's addresses from its
// netns) in another, and compares where real connections land: the
// proxy's outbound or inbound listener, the app, the peer, or nowhere.
// Differences are listed in the compatibility doc as traffic-<case>.
func TestTrafficParity(t *testing.T) {
	nstest.RequireRoot(t)
	known := knownDifferences(t)
	var table strings.Builder
	ran := 0
	for _, c := range sidecarCorpus {
		if !trafficCase(c) {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			it, st := newTrafficPod(t, c), newTrafficPod(t, c)
			iok, sok := it.applyIstio(t, c), st.applySluice(t, c)
			if !iok || !sok {
				fmt.Fprintf(&table, "%-34s | ADD fails: Istio %v, sluice %v (TestSidecarParity compares it)\n", c.name, !iok, !sok)
				return
			}
			ran++
			istio, sluice := it.outcomes(c), st.outcomes(c)
			var d []string
			for _, k := range sortedKeys(istio) {
				if istio[k] != sluice[k] {
					d = append(d, k)
				}
			}
			fmt.Fprintf(&table, "%-34s | %v | %v\n", c.name, istio, sluice)
			want, listed := known["traffic-"+c.name]
			got := strings.Join(d, ",")
			switch {
			case len(d) > 0 && want != got:
				t.Errorf("connections land elsewhere under sluice than under Istio (%s), and %s lists %q:\n  istio:  %v\n  sluice: %v",
					got, compatDoc, want, istio, sluice)
			case len(d) == 0 && listed:
				t.Errorf("%s lists traffic-%s, but the connections land alike: remove the row", compatDoc, c.name)
			}
		})
	}
	if ran == 0 {
		t.Fatal("no corpus case was run with traffic")
	}
	t.Log("\n" + table.String())
}

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
