package mesh

import (
	"fmt"
	"testing"
	"time"
)

// Two ambient pods: every connection A makes to B's app goes through
// ztunnel over HBONE with mutual TLS (ztunnel, as B's proxy, counts each
// one under security_policy="mutual_tls" with A's and B's identities),
// and B's app serves A. A pod opted out and a pod in an unlabelled
// namespace reach B in plain text: ztunnel sees them, never as mTLS peers.
func TestAmbientPodsTalkOverHBONEWithMutualTLS(t *testing.T) {
	zt := requireZtunnel(t)
	mesh := namespace(t, map[string]string{labelDataplane: "ambient"})
	plainNS := namespace(t, nil)
	b := start(t, mesh, appPod("b", "", "127.0.0.1:1", nil))
	target := b.Status.PodIP + ":8080"
	a := start(t, mesh, appPod("a", "", target, nil))
	out := start(t, mesh, appPod("out", "", target, map[string]string{labelDataplane: "none"}))
	plain := start(t, plainNS, appPod("plain", "", target, nil))

	eventually(t, time.Minute, "10 replies to a, out and plain", func() error {
		for _, p := range []struct{ ns, name string }{{mesh, "a"}, {mesh, "out"}, {plainNS, "plain"}} {
			if ok, failed := count(dials(t, p.ns, p.name), "app"); ok < 10 {
				return fmt.Errorf("%s/%s: %d replies, %d failures: %q", p.ns, p.name, ok, failed, last(dials(t, p.ns, p.name)))
			}
		}
		return nil
	})
	// Served first, counted by ztunnel second: every connection B's app
	// served was opened by ztunnel before.
	fromA := served(t, mesh, "b", a.Status.PodIP)
	mtls, err := opened(zt, mesh, "a", "b", "mutual_tls")
	if err != nil {
		t.Fatal(err)
	}
	if fromA < 10 || mtls < float64(fromA) {
		t.Errorf("b served %d connections from a, ztunnel opened %v from a with mutual TLS: want every one mTLS", fromA, mtls)
	}
	// Outside the mesh, out and plain reach B in plain text: ztunnel, as
	// B's proxy, takes them on 15006 (PERMISSIVE) without an identity.
	plainServed := 0
	for _, p := range []struct{ name, ip string }{{"out", out.Status.PodIP}, {"plain", plain.Status.PodIP}} {
		n := served(t, mesh, "b", p.ip)
		mtlsFrom, err := ztunnelCount(zt, "istio_tcp_connections_opened_total", map[string]string{
			"source_workload": p.name, "connection_security_policy": "mutual_tls"})
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 || mtlsFrom != 0 {
			t.Errorf("%s: b served %d connections, ztunnel counted %v from it with mTLS: want served, none mTLS", p.name, n, mtlsFrom)
		}
		plainServed += n
	}
	plainText, err := opened(zt, mesh, "", "b", "unknown")
	if err != nil {
		t.Fatal(err)
	}
	if plainText < float64(plainServed) {
		t.Errorf("b served %d plain-text connections from out and plain, ztunnel opened %v: every one goes through ztunnel", plainServed, plainText)
	}
	t.Logf("out, plain -> b: b served %d, ztunnel opened %v in plain text, none with mTLS", plainServed, plainText)
	t.Logf("a -> b: b served %d connections from a; ztunnel opened %v with mutual TLS", fromA, mtls)
}

// last is the last element, or "" for none.
func last(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[len(s)-1]
}
