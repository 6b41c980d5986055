// Package istiotest programs Istio's own capture rules into test network
// namespaces, with the tools istio-cni runs (`nft -f`, iptables-restore),
// so tests can stand a pod istio-cni captured next to one sluice did. For
// tests only; rules/README.md says where each rule text comes from.
package istiotest

import (
	"bytes"
	"embed"
	"net"
	"net/netip"
	"strconv"
	"testing"
	"time"

	"github.com/sluicemesh/sluice/internal/origdst"
	"github.com/sluicemesh/sluice/test/harness/nstest"
)

//go:embed rules/*.nft rules/*.iptables
var rules embed.FS

// Ruleset is one of Istio's captures and the tool that loads it.
type Ruleset struct {
	File string // under rules/
	Tool string // nft, iptables-nft-restore, ip6tables-nft-restore, iptables-legacy-restore
	// Ambient rulesets also get Istio's in-pod policy route.
	Ambient bool
}

// The captures istio-cni programs in a pod, per mode and backend.
var (
	SidecarNft       = Ruleset{File: "sidecar.nft", Tool: "nft"}
	AmbientNft       = Ruleset{File: "ambient.nft", Tool: "nft", Ambient: true}
	SidecarIptables  = Ruleset{File: "sidecar.iptables", Tool: "iptables-nft-restore"}
	Sidecar6Iptables = Ruleset{File: "sidecar6.iptables", Tool: "ip6tables-nft-restore"}
	AmbientIptables  = Ruleset{File: "ambient.iptables", Tool: "iptables-nft-restore", Ambient: true}
	// SidecarLegacy is SidecarIptables written through x_tables, which
	// netlink does not see.
	SidecarLegacy = Ruleset{File: "sidecar.iptables", Tool: "iptables-legacy-restore"}
)

// Program loads r into ns as istio-cni would, failing t if the tool fails.
func Program(t testing.TB, ns *nstest.NS, r Ruleset) {
	t.Helper()
	if out, err := load(ns, r); err != nil {
		t.Fatalf("program Istio's %s with %s in %s: %v\n%s", r.File, r.Tool, ns.Name, err, out)
	}
	if r.Ambient {
		// cni/pkg/iptables: ip rule add fwmark 0x111/0xfff pref 32764
		// lookup 100, and the local default route of table 100.
		ns.Run(t, "ip", "rule", "add", "fwmark", "0x111/0xfff", "pref", "32764", "lookup", "100")
		ns.Run(t, "ip", "route", "add", "local", "0.0.0.0/0", "dev", "lo", "table", "100")
	}
}

// TryProgram is Program that reports a failure instead of failing t, for
// backends the machine may lack (iptables-legacy without x_tables).
func TryProgram(ns *nstest.NS, r Ruleset) ([]byte, error) { return load(ns, r) }

func load(ns *nstest.NS, r Ruleset) ([]byte, error) {
	text, err := rules.ReadFile("rules/" + r.File)
	if err != nil {
		return nil, err
	}
	args := []string{}
	if r.Tool == "nft" {
		args = []string{"-f", "-"}
	}
	cmd := ns.Command(r.Tool, args...)
	cmd.Stdin = bytes.NewReader(text)
	return cmd.CombinedOutput()
}

// Save is what iptables-nft-save (v4 and v6) and `nft list ruleset` show
// in ns, for comparing the kernel before and after.
func Save(t testing.TB, ns *nstest.NS) string {
	t.Helper()
	var b bytes.Buffer
	for _, tool := range []string{"iptables-nft-save", "ip6tables-nft-save"} {
		out, err := ns.Command(tool).CombinedOutput()
		if err != nil {
			t.Fatalf("%s in %s: %v\n%s", tool, ns.Name, err, out)
		}
		b.Write(dropComments(out))
	}
	b.WriteString(ns.Run(t, "nft", "list", "ruleset"))
	return b.String()
}

// dropComments drops iptables-save's "# Generated ... on <date>" lines.
func dropComments(out []byte) []byte {
	var keep [][]byte
	for _, l := range bytes.Split(out, []byte("\n")) {
		if !bytes.HasPrefix(l, []byte("#")) {
			keep = append(keep, l)
		}
	}
	return bytes.Join(keep, []byte("\n"))
}

// Proxy listens on port in ns, as a sidecar or ztunnel's in-pod socket
// would, and sends the original destination of each connection accepted.
// It also gives ns a default route out of eth0, so the app can dial out.
func Proxy(t testing.TB, ns *nstest.NS, port int) <-chan netip.AddrPort {
	t.Helper()
	var ln net.Listener
	if err := ns.Do(func() (err error) {
		ln, err = net.Listen("tcp", ":"+strconv.Itoa(port))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	out := make(chan netip.AddrPort, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			dst, err := origdst.Get(c.(*net.TCPConn))
			c.Close()
			if err == nil {
				out <- dst
			}
		}
	}()
	ns.Run(t, "ip", "route", "replace", "default", "dev", "eth0")
	return out
}

// ExpectCaptured dials out of ns and waits for the connection on the proxy
// behind landed, with the address dialled as its original destination; by
// names whose rules are expected to capture it.
func ExpectCaptured(t testing.TB, ns *nstest.NS, landed <-chan netip.AddrPort, by string) {
	t.Helper()
	want := netip.MustParseAddrPort("192.0.2.80:8080")
	c, err := ns.Dial("tcp", want.String(), 2*time.Second)
	if err != nil {
		t.Fatalf("dial %s from %s (%s): %v", want, ns.Name, by, err)
	}
	c.Close()
	select {
	case got := <-landed:
		if got != want {
			t.Errorf("%s: the proxy got a connection for %s, want %s", by, got, want)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: the connection to %s never reached the proxy", by, want)
	}
}
