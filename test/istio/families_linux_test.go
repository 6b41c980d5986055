package istio

import (
	"net"
	"testing"
	"time"

	"github.com/sluicemesh/sluice/daemon/policy"
	"github.com/sluicemesh/sluice/daemon/redirect"
	"github.com/sluicemesh/sluice/daemon/redirect/kernel"
	"github.com/sluicemesh/sluice/test/harness/nstest"
)

func listenIn(t *testing.T, ns *nstest.NS, network, addr string) *net.TCPListener {
	t.Helper()
	var l net.Listener
	if err := ns.Do(func() (err error) { l, err = net.Listen(network, addr); return err }); err != nil {
		t.Fatalf("listen %s in %s: %v", addr, ns.Name, err)
	}
	t.Cleanup(func() { l.Close() })
	return l.(*net.TCPListener)
}

// accepted says whether l takes a connection within a second.
func accepted(l *net.TCPListener) bool {
	_ = l.SetDeadline(time.Now().Add(time.Second))
	c, err := l.Accept()
	if err == nil {
		c.Close()
	}
	return err == nil
}

// A dual-stack pod whose Envoy listens on 0.0.0.0 only (no ISTIO_DUAL_STACK)
// keeps working: its IPv6 connections go out uncaptured, as under Istio.
// With ISTIO_DUAL_STACK they are captured, and with no IPv6 listener they
// are refused, never let past the proxy.
func TestDualStackCaptureFollowsIstio(t *testing.T) {
	nstest.RequireRoot(t)
	for _, tc := range []struct {
		name       string
		env        map[string]string
		v6Captured bool
	}{
		{"without ISTIO_DUAL_STACK", nil, false},
		{"with ISTIO_DUAL_STACK", a(envDualStack, "true"), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod, peer := nstest.New(t, "pod"), nstest.New(t, "peer")
			nstest.Veth(t, pod, "eth0", []string{"10.0.0.5/24", "fd00::5/64"}, peer, "eth0", []string{"10.0.0.6/24", "fd00::6/64"})
			c := sidecarCase{name: "dual", ips: dual, env: tc.env}
			d, err := policy.Rules{Sidecar: redirect.DefaultSpec()}.Decide(c.pod(), nil, c.ips)
			if err != nil || !d.Capture {
				t.Fatalf("policy: %+v %v", d, err)
			}
			rs, err := redirect.Build(d.Spec)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := (kernel.Netlink{}).Apply(redirect.Netns(pod.Handle(t)), rs); err != nil {
				t.Fatal(err)
			}
			proxy := listenIn(t, pod, "tcp4", "0.0.0.0:15001") // Envoy without dual stack
			server4 := listenIn(t, peer, "tcp4", "10.0.0.6:8080")
			server6 := listenIn(t, peer, "tcp6", "[fd00::6]:8080")

			c4, err := pod.Dial("tcp4", "10.0.0.6:8080", 2*time.Second)
			if err != nil {
				t.Fatalf("IPv4 dial: %v", err)
			}
			c4.Close()
			if !accepted(proxy) || accepted(server4) {
				t.Fatal("IPv4 connection not captured to 15001")
			}
			c6, err := pod.Dial("tcp6", "[fd00::6]:8080", 2*time.Second)
			if tc.v6Captured {
				if err == nil {
					c6.Close()
					t.Fatal("IPv6 connection captured with no IPv6 proxy listener, yet it connected")
				}
				if accepted(server6) {
					t.Fatal("IPv6 connection reached the server past the proxy")
				}
				return
			}
			if err != nil {
				t.Fatalf("IPv6 dial, not captured: %v", err)
			}
			c6.Close()
			if !accepted(server6) {
				t.Fatal("IPv6 connection did not reach the server")
			}
		})
	}
}
