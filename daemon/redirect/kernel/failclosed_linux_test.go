package kernel

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/sluicemesh/sluice/daemon/redirect"
	"github.com/sluicemesh/sluice/test/harness/nstest"
)

// tryDial is dialFrom that hands back the failure instead of ending the
// test: here a refused connection is the answer wanted.
func tryDial(ns *nstest.NS, network, addr string) (line string, err error) {
	err = ns.Do(func() (err error) { line, err = exchange(network, addr); return err })
	return line, err
}

// TestFailClosed: with the proxy's inbound listener absent, a captured
// connection must not reach the app in any mode; with it present, the
// connection lands on it with the original destination.
func TestFailClosed(t *testing.T) {
	ambient := redirect.DefaultAmbientSpec()
	tproxy := redirect.DefaultSpec()
	tproxy.Interception = redirect.InterceptTProxy
	for _, tc := range []struct {
		name string
		spec redirect.Spec
	}{
		{"sidecar redirect", redirect.DefaultSpec()},
		{"sidecar tproxy", tproxy},
		{"ambient", ambient},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tp := newNetPair(t)
			serveTCP(t, tp.pod, "[::]:8080", "pod-8080", false)
			mustApply(t, tp, tc.spec)
			for _, addr := range []string{podV4 + ":8080", "[" + podV6 + "]:8080"} {
				if line, err := tryDial(tp.node, "tcp", addr); err == nil {
					t.Errorf("%s with nothing on 15006: reached %q, want the connection refused or dropped", addr, line)
				}
			}
			// The control: a proxy on 15006 gets the connection and its
			// original destination (transparent, as TPROXY needs).
			serveTCP(t, tp.pod, "[::]:15006", "proxy-in", true)
			expect(t, "v4 with a listener", dialFrom(t, tp.node, "tcp", podV4+":8080"), "proxy-in "+podV4+":8080")
			expect(t, "v6 with a listener", dialFrom(t, tp.node, "tcp", "["+podV6+"]:8080"), "proxy-in ["+podV6+"]:8080")
		})
	}
}

// An ambient Spec journaled while inbound used TPROXY builds today's
// fail-closed rules, and a netns still holding the old ones reports drift,
// so the reconciler re-applies.
func TestOldAmbientJournalFailsClosed(t *testing.T) {
	old := `{"Mode":"ambient","Interception":"TPROXY","OutboundPort":15001,"InboundPort":15006,"HBONEPort":15008,` +
		`"DNSPort":15053,"CaptureDNS":false,"IPv4":true,"IPv6":true,"routeMark":273,"routeMarkMask":4095,"routeTable":100,` +
		`"routePriority":32764,"ztunnelMark":1337,"ztunnelMarkMask":4095,` +
		`"probeSNATIPv4":"169.254.7.127","probeSNATIPv6":"fd16:9254:7127:1337:ffff:ffff:ffff:ffff"}`
	var s redirect.Spec
	if err := json.Unmarshal([]byte(old), &s); err != nil {
		t.Fatal(err)
	}
	r, err := redirect.Build(s)
	if err != nil {
		t.Fatalf("Build of an old ambient journal: %v", err)
	}
	if text := r.Render(); strings.Contains(text, "tproxy") || !strings.Contains(text, "redirect to :15006") {
		t.Fatalf("old ambient journal builds TPROXY inbound:\n%s", text)
	}

	tp := newNetPair(t)
	serveTCP(t, tp.pod, "[::]:8080", "pod-8080", false)
	tp.pod.Run(t, "nft", "-f", "testdata/legacy/ambient-tproxy.nft")
	drift, err := verifyIn(tp.pod.Handle(t), r)
	if err != nil {
		t.Fatal(err)
	}
	if all := strings.Join(drift, "\n"); !strings.Contains(all, "inbound-tproxy-v4") || !strings.Contains(all, "inbound-v4") {
		t.Errorf("Verify on the old TPROXY rules: %q, want the old inbound rule and the new one named", drift)
	}
	if err := applyIn(tp.pod.Handle(t), r); err != nil {
		t.Fatal(err)
	}
	if line, err := tryDial(tp.node, "tcp", podV4+":8080"); err == nil {
		t.Errorf("after re-Apply with nothing on 15006: reached %q", line)
	}
}
