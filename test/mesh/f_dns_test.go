package mesh

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// noResolver is the only nameserver the DNS test's client has: an address
// nothing answers (TEST-NET-1). A name it resolves was answered by
// ztunnel's DNS proxy, through sluice's capture of the pod's port 53.
const noResolver = "192.0.2.53"

// With DNS capture on (the chart's default), an ambient pod resolves a
// Service's name through ztunnel's DNS proxy and reaches it over the mesh.
func TestAmbientPodResolvesThroughZtunnelDNS(t *testing.T) {
	zt := requireZtunnel(t)
	mesh := namespace(t, map[string]string{labelDataplane: "ambient"})
	start(t, mesh, appPod("b", "", "127.0.0.1:1", nil))
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "b"},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": "b"},
			Ports:    []corev1.ServicePort{{Port: 8080, TargetPort: intstr.FromInt32(8080)}},
		},
	}
	if _, err := client(t).CoreV1().Services(mesh).Create(t.Context(), svc, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create Service b: %v", err)
	}
	name := "b." + mesh + ".svc.cluster.local"
	a := appPod("a", "", name+":8080", nil)
	a.Spec.DNSPolicy = corev1.DNSNone
	a.Spec.DNSConfig = &corev1.PodDNSConfig{Nameservers: []string{noResolver}}
	start(t, mesh, a)
	waitReplies(t, mesh, "a", 3)
	mtls, err := opened(zt, mesh, "a", "b", "mutual_tls")
	if err != nil {
		t.Fatal(err)
	}
	ok, failed := count(dials(t, mesh, "a"), "app")
	if mtls < 3 {
		t.Errorf("a reached b by name %d times, ztunnel opened %v mTLS connections", ok, mtls)
	}
	t.Logf("a -> %s:8080 (nameserver %s only): %d replies, %d failed dials; ztunnel opened %v with mTLS", name, noResolver, ok, failed, mtls)

	// The same pod outside the mesh resolves nothing: its DNS is not
	// captured and nothing answers at noResolver.
	plainNS := namespace(t, nil)
	p := appPod("plain", "", name+":8080", nil)
	p.Spec.DNSPolicy = corev1.DNSNone
	p.Spec.DNSConfig = &corev1.PodDNSConfig{Nameservers: []string{noResolver}}
	start(t, plainNS, p)
	eventually(t, time.Minute, "plain's first dial result", func() error {
		if len(dials(t, plainNS, "plain")) == 0 {
			return fmt.Errorf("no dial yet")
		}
		return nil
	})
	if ok, _ := count(dials(t, plainNS, "plain"), "app"); ok != 0 {
		t.Errorf("plain, outside the mesh, resolved %s with no nameserver: %q", name, dials(t, plainNS, "plain"))
	}
}
