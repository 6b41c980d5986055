package mesh

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/sluicemesh/sluice/test/harness/nodetest"
)

// The mesh across the two nodes. Each node runs its own ztunnel and its
// own agent; pod traffic between the nodes crosses the veth the harness
// lays between them, a stand-in for the primary CNI's routes between
// nodes (host-gw routing, as flannel's host-gw or Calico's BGP mode do):
// plain IP routing of each node's pod range, no overlay and no policy.

// peerNode is the second node, where these tests put one end of each
// connection.
func peerNode(t *testing.T) *nodetest.Cluster {
	t.Helper()
	nodes := cluster.Nodes()
	if len(nodes) < 2 {
		t.Fatalf("the mesh suite's cluster has %d nodes, want 2", len(nodes))
	}
	return nodes[1]
}

// ztunnels are the real ztunnel's pods on the first and the second node.
func ztunnels(t *testing.T) (first, second *corev1.Pod) {
	t.Helper()
	return requireZtunnel(t), readyPod(t, istioNS, "app=ztunnel", peerNode(t).NodeName, 2*time.Minute)
}

// An ambient pod on the first node reaches an ambient pod on the second
// over HBONE with mutual TLS: ztunnel on the first node opens each
// connection as the source's proxy and ztunnel on the second takes it as
// the destination's, both with A's and B's identities and
// security_policy="mutual_tls", and B's app serves A.
func TestAmbientPodsAcrossNodesTalkOverHBONE(t *testing.T) {
	zt1, zt2 := ztunnels(t)
	mesh := namespace(t, map[string]string{labelDataplane: "ambient"})
	b := start(t, mesh, onNode(appPod("b", "", "127.0.0.1:1", nil), peerNode(t).NodeName))
	a := start(t, mesh, appPod("a", "", b.Status.PodIP+":8080", nil))
	if a.Spec.NodeName == b.Spec.NodeName {
		t.Fatalf("a and b both on %s", a.Spec.NodeName)
	}
	waitReplies(t, mesh, "a", 10)

	fromA := served(t, mesh, "b", a.Status.PodIP)
	out, err := ztunnelCount(zt1, "istio_tcp_connections_opened_total", map[string]string{
		"reporter": "source", "source_workload": "a", "destination_workload": "b",
		"destination_workload_namespace": mesh, "connection_security_policy": "mutual_tls"})
	if err != nil {
		t.Fatal(err)
	}
	in, err := opened(zt2, mesh, "a", "b", "mutual_tls")
	if err != nil {
		t.Fatal(err)
	}
	if fromA < 10 || out < float64(fromA) || in < float64(fromA) {
		t.Errorf("b (on %s) served %d connections from a (on %s); mutual TLS: %v opened by a's ztunnel, %v by b's: want every one both sides",
			b.Spec.NodeName, fromA, a.Spec.NodeName, out, in)
	}
	t.Logf("a (%s) -> b (%s): b served %d; mTLS connections opened: %v by ztunnel on a's node, %v by ztunnel on b's",
		a.Spec.NodeName, b.Spec.NodeName, fromA, out, in)
}

// An AuthorizationPolicy enforced by ztunnel on B's node denies a client
// on the other node by its service account, while another client there
// with an identity of its own still reaches B: the denied identity
// crossed the nodes inside HBONE, from istiod's certificate.
func TestAuthorizationPolicyDeniesAcrossNodes(t *testing.T) {
	ztunnels(t)
	mesh := namespace(t, map[string]string{labelDataplane: "ambient"})
	serviceAccount(t, mesh, "client-d")
	b := start(t, mesh, onNode(appPod("b", "", "127.0.0.1:1", nil), peerNode(t).NodeName))
	target := b.Status.PodIP + ":8080"
	d := start(t, mesh, appPod("d", "client-d", target, nil))
	start(t, mesh, appPod("a", "", target, nil))
	waitReplies(t, mesh, "d", 3)

	istioObject(t, mesh, "authorizationpolicies", "AuthorizationPolicy", "deny-d", map[string]any{
		"selector": map[string]any{"matchLabels": map[string]string{"app": "b"}},
		"action":   "DENY",
		"rules": []any{map[string]any{"from": []any{map[string]any{"source": map[string]any{
			"principals": []string{"cluster.local/ns/" + mesh + "/sa/client-d"},
		}}}}},
	})
	eventually(t, time.Minute, "d denied", func() error {
		r := dials(t, mesh, "d")
		if len(r) < 4 {
			return fmt.Errorf("%d dials", len(r))
		}
		if ok, _ := count(r[len(r)-4:], "app"); ok != 0 {
			return fmt.Errorf("last dials %q", r[len(r)-4:])
		}
		return nil
	})
	dBefore, aBefore := len(dials(t, mesh, "d")), len(dials(t, mesh, "a"))
	servedD := served(t, mesh, "b", d.Status.PodIP)
	eventually(t, time.Minute, "10 more dials from d and a", func() error {
		rd, ra := dials(t, mesh, "d")[dBefore:], dials(t, mesh, "a")[aBefore:]
		if len(rd) < 10 || len(ra) < 10 {
			return fmt.Errorf("%d dials from d, %d from a", len(rd), len(ra))
		}
		if ok, _ := count(rd, "app"); ok != 0 {
			t.Fatalf("d reached b %d times under the deny policy: %q", ok, rd)
		}
		if ok, _ := count(ra, "app"); ok < 8 {
			return fmt.Errorf("a reached b %d of %d times: %q", ok, len(ra), last(ra))
		}
		return nil
	})
	if n := served(t, mesh, "b", d.Status.PodIP); n != servedD {
		t.Errorf("b served d %d times under the deny policy", n-servedD)
	}
}

// A sidecar-mode pod on the second node and an ambient pod on the first
// talk both ways. The sidecar is the test app's forwarding stand-in for
// Envoy in plain text (no Envoy is built here), captured by sluice's
// sidecar rules: its app's dial to the ambient pod leaves through the
// proxy (outbound capture) and reaches the ambient pod through its
// node's ztunnel (inbound capture); the ambient pod's dial to the sidecar
// pod leaves through ztunnel and lands on the proxy's inbound port.
func TestSidecarAndAmbientPodsAcrossNodes(t *testing.T) {
	zt1, _ := ztunnels(t)
	mesh := namespace(t, map[string]string{labelDataplane: "ambient"})
	sidecarNS := namespace(t, nil)
	b := start(t, mesh, appPod("b", "", "127.0.0.1:1", nil))
	s := images.SidecarPod("s", b.Status.PodIP+":8080")
	s.Spec.Containers[1].Command = []string{"/testapp", "forward-proxy", "15001", "15006"}
	s = start(t, sidecarNS, onNode(s, peerNode(t).NodeName))
	a := start(t, mesh, appPod("a", "", s.Status.PodIP+":8080", nil))

	waitReplies(t, sidecarNS, "s", 5)
	waitReplies(t, mesh, "a", 5)
	proxy := logs(t, sidecarNS, "s", "istio-proxy")
	for _, want := range []string{
		"proxy forwarded on :15001 original dst " + b.Status.PodIP + ":8080 from ",
		"proxy forwarded on :15006 original dst " + s.Status.PodIP + ":8080 from " + a.Status.PodIP + ":",
	} {
		if !strings.Contains(proxy, want) {
			t.Errorf("the sidecar's proxy never logged %q:\n%.2000s", want, proxy)
		}
	}
	if n := served(t, mesh, "b", s.Status.PodIP); n < 5 {
		t.Errorf("b served %d connections from the sidecar pod, want its dials", n)
	}
	if n := served(t, sidecarNS, "s", "127.0.0.1"); n < 5 {
		t.Errorf("the sidecar pod's app served %d connections from its proxy, want a's dials", n)
	}
	// ztunnel on the first node took the sidecar pod's connections to b
	// as b's proxy, in plain text (the stand-in speaks no HBONE), and
	// a's to the sidecar pod as a's.
	inB, err := opened(zt1, mesh, "", "b", "unknown")
	if err != nil {
		t.Fatal(err)
	}
	outA, err := ztunnelCount(zt1, "istio_tcp_connections_opened_total", map[string]string{
		"reporter": "source", "source_workload": "a", "source_workload_namespace": mesh})
	if err != nil {
		t.Fatal(err)
	}
	if inB < 5 || outA < 5 {
		t.Errorf("ztunnel on %s opened %v plain-text connections to b and %v from a: want the pods' dials through it", cluster.NodeName, inB, outA)
	}
	t.Logf("s (%s, sidecar) <-> a, b (%s, ambient): ztunnel opened %v to b, %v from a", s.Spec.NodeName, b.Spec.NodeName, inB, outA)
}
