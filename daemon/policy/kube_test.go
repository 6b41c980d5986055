package policy

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/sluicemesh/sluice/daemon/redirect"
)

func decide(t *testing.T, k *Kube, p Pod) (Decision, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return k.Decide(ctx, p)
}

func TestKubeDecides(t *testing.T) {
	k, c := fakePolicy(t)
	ns := namespace(t, c, nil)
	ambientNS := namespace(t, c, map[string]string{labelDataplaneMode: "ambient"})
	plain := injected(func(p *corev1.Pod) { delete(p.Annotations, annSidecarStatus) })
	for _, tc := range []struct {
		name    string
		ns      string
		pod     *corev1.Pod
		capture bool
		why     string
	}{
		{"injected", ns, injected(nil), true, "istio sidecar"},
		{"not injected", ns, plain, false, "not injected"},
		{"inject false", ns, injected(func(p *corev1.Pod) { p.Labels = map[string]string{annSidecarInject: "false"} }), false, "inject is false"},
		{"host network", ns, injected(func(p *corev1.Pod) { p.Spec.HostNetwork = true }), false, "host-network"},
		{"ambient namespace", ambientNS, plain, false, "ambient"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := tc.pod.DeepCopy()
			pod.Name = strings.ReplaceAll(tc.name, " ", "-")
			d, err := decide(t, k, createPod(t, c, tc.ns, node, pod))
			if err != nil {
				t.Fatal(err)
			}
			if d.Capture != tc.capture || !strings.Contains(d.Reason, tc.why) {
				t.Errorf("decision capture=%v reason %q: want capture=%v saying %q", d.Capture, d.Reason, tc.capture, tc.why)
			}
			if d.Capture && !reflect.DeepEqual(d.Spec, want(nil)) {
				t.Errorf("spec %+v, want Istio's defaults", d.Spec)
			}
		})
	}
}

func TestKubeExcludedNamespace(t *testing.T) {
	k, _ := fakePolicy(t)
	// Decided without a lookup: the agent's own pod does not exist in the
	// API server here, and must still pass.
	d, err := decide(t, k, Pod{Namespace: agentNS, Name: "sluice-agent-x1", UID: "u"})
	if err != nil {
		t.Fatal(err)
	}
	if d.Capture || !strings.Contains(d.Reason, "excluded") {
		t.Errorf("decision %+v: want pass-through as excluded", d)
	}
}

func TestKubeAnnotations(t *testing.T) {
	k, c := fakePolicy(t)
	ns := namespace(t, c, nil)
	valid := []struct {
		ann, value string
		want       func(*redirect.Spec)
	}{
		{annInterceptionMode, "REDIRECT", nil},
		{annInterceptionMode, "TPROXY", func(s *redirect.Spec) {
			s.Interception, s.InboundPassPorts = redirect.InterceptTProxy, []uint16{15020, 15021, 15090}
		}},
		{annIncludeOutboundCIDRs, "", func(s *redirect.Spec) { s.IncludeNoOutboundCIDRs = true }},
		{annIncludeInboundPorts, "", func(s *redirect.Spec) { s.IncludeNoInboundPorts, s.InboundPassPorts = true, []uint16{15008} }},
		{annIncludeOutboundCIDRs, "10.96.0.0/12,fd00::/108", func(s *redirect.Spec) { s.IncludeOutboundCIDRs = prefixes("10.96.0.0/12", "fd00::/108") }},
		{annIncludeOutboundCIDRs, "*", nil},
		{annExcludeOutboundCIDRs, "169.254.169.254/32", func(s *redirect.Spec) { s.ExcludeOutboundCIDRs = prefixes("169.254.169.254/32") }},
		{annIncludeInboundPorts, "8080,9090", func(s *redirect.Spec) {
			s.IncludeInboundPorts, s.InboundPassPorts = []uint16{8080, 9090}, []uint16{15008}
		}},
		{annExcludeOutboundPorts, "0", func(s *redirect.Spec) { s.ExcludeOutboundPorts = nil }},
		{annRerouteInterfaces, "net1", func(s *redirect.Spec) { s.RerouteInterfaces = []string{"net1"} }},
		{annIncludeInboundPorts, "*", nil},
		{annExcludeInboundPorts, "9000", func(s *redirect.Spec) { s.ExcludeInboundPorts = []uint16{9000} }},
		{annIncludeOutboundPorts, "443", func(s *redirect.Spec) { s.IncludeOutboundPorts = []uint16{443} }},
		{annExcludeOutboundPorts, "5432,6379", func(s *redirect.Spec) { s.ExcludeOutboundPorts = []uint16{5432, 6379} }},
		{annExcludeInterfaces, "net1", func(s *redirect.Spec) { s.ExcludeInterfaces = []string{"net1"} }},
	}
	invalid := []struct{ ann, value string }{
		{annInterceptionMode, "BOGUS"},
		{annIncludeOutboundCIDRs, "10.0.0.0/40"},
		{annExcludeOutboundCIDRs, "nope"},
		{annIncludeInboundPorts, "80,x"},
		{annExcludeInboundPorts, "70000"},
		{annIncludeOutboundPorts, "*"},
		{annExcludeInterfaces, "this-name-is-too-long"},
		{annRerouteInterfaces, "net 1"},
	}
	n := 0
	name := func() string { n++; return "p" + string(rune('a'+n/26)) + string(rune('a'+n%26)) }
	for _, tc := range valid {
		t.Run("valid "+tc.ann+"="+tc.value, func(t *testing.T) {
			pod := injected(func(p *corev1.Pod) { p.Name = name(); p.Annotations[tc.ann] = tc.value })
			d, err := decide(t, k, createPod(t, c, ns, node, pod))
			if err != nil {
				t.Fatal(err)
			}
			if w := want(tc.want); !d.Capture || !reflect.DeepEqual(d.Spec, w) {
				t.Errorf("decision capture=%v\n spec %+v\nwant %+v", d.Capture, d.Spec, w)
			}
		})
	}
	for _, tc := range invalid {
		t.Run("invalid "+tc.ann+"="+tc.value, func(t *testing.T) {
			pod := injected(func(p *corev1.Pod) { p.Name = name(); p.Annotations[tc.ann] = tc.value })
			p := createPod(t, c, ns, node, pod)
			_, err := decide(t, k, p)
			var ae *AnnotationError
			if !errors.As(err, &ae) {
				t.Fatalf("got %v, want an AnnotationError", err)
			}
			for _, s := range []string{p.Namespace + "/" + p.Name, tc.ann, `"` + tc.value + `"`} {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not name %s", err, s)
				}
			}
		})
	}
}

func TestKubeProxyIDs(t *testing.T) {
	k, c := fakePolicy(t)
	pod := injected(func(p *corev1.Pod) {
		proxyOf(p).SecurityContext = &corev1.SecurityContext{RunAsUser: ptr(int64(1500)), RunAsGroup: ptr(int64(1600))}
	})
	d, err := decide(t, k, createPod(t, c, namespace(t, c, nil), node, pod))
	if err != nil {
		t.Fatal(err)
	}
	if d.Spec.ProxyUID != 1500 || d.Spec.ProxyGID != 1600 {
		t.Errorf("proxy uid/gid %d/%d, want 1500/1600", d.Spec.ProxyUID, d.Spec.ProxyGID)
	}
}
func TestKubePodNotFound(t *testing.T) {
	k, c := fakePolicy(t)
	ns := namespace(t, c, nil)
	_, err := decide(t, k, Pod{Namespace: ns, Name: "ghost", UID: "1234"})
	if !errors.Is(err, ErrPodNotFound) {
		t.Fatalf("got %v, want ErrPodNotFound", err)
	}
	for _, s := range []string{ns + "/ghost", node} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not name %s", err, s)
		}
	}

	// The name exists, but for another pod than the runtime's sandbox.
	p := createPod(t, c, ns, node, injected(nil))
	p.UID = "not-" + p.UID
	if _, err := decide(t, k, p); !errors.Is(err, ErrPodNotFound) || !strings.Contains(err.Error(), p.UID) {
		t.Errorf("stale uid: got %v, want ErrPodNotFound naming %s", err, p.UID)
	}
}
