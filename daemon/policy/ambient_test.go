package policy

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluicemesh/sluice/daemon/redirect"
)

func TestAmbientEnrolment(t *testing.T) {
	ambientNS := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{labelDataplaneMode: "ambient"}}}
	plainNS := &corev1.Namespace{}
	pod := func(labels, ann map[string]string, hostNet bool) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: ann}, Spec: corev1.PodSpec{HostNetwork: hostNet}}
	}
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		ns   *corev1.Namespace
		want bool
	}{
		{"namespace label", pod(nil, nil, false), ambientNS, true},
		{"pod label", pod(map[string]string{labelDataplaneMode: "ambient"}, nil, false), plainNS, true},
		{"pod opts out", pod(map[string]string{labelDataplaneMode: "none"}, nil, false), ambientNS, false},
		{"sidecar wins", pod(nil, map[string]string{annSidecarStatus: "{}"}, false), ambientNS, false},
		{"host network", pod(nil, nil, true), ambientNS, false},
		{"no label", pod(nil, nil, false), plainNS, false},
		{"namespace unknown", pod(nil, nil, false), nil, false},
	} {
		if got := isAmbient(tc.pod, tc.ns, AmbientConfig{}); got != tc.want {
			t.Errorf("%s: isAmbient = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestDecideAmbientOptions(t *testing.T) {
	cfg := AmbientConfig{Base: redirect.DefaultAmbientSpec(), DNSCapture: true}
	d, err := decideAmbient(&corev1.Pod{}, cfg)
	if err != nil || !d.Capture || d.Spec.Mode != redirect.ModeAmbient || !d.Spec.CaptureDNS || d.Spec.BypassInboundCapture {
		t.Fatalf("default: %+v %v", d.Spec, err)
	}
	d, err = decideAmbient(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{
		annAmbientDNSCapture: "false", annAmbientBypassInbound: "true"}}}, cfg)
	if err != nil || d.Spec.CaptureDNS || !d.Spec.BypassInboundCapture {
		t.Fatalf("annotations: %+v %v", d.Spec, err)
	}
	// Istio ignores a value that is not a boolean, with a warning; the
	// pod starts with the node's default.
	d, err = decideAmbient(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{
		annAmbientDNSCapture: "maybe", annAmbientBypassInbound: "yes"}}}, cfg)
	if err != nil || !d.Spec.CaptureDNS || d.Spec.BypassInboundCapture || len(d.Warnings) != 2 {
		t.Fatalf("non-boolean annotations: %+v %v warnings %q", d.Spec, err, d.Warnings)
	}
	d, err = decideAmbient(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{
		annRerouteInterfaces: " net1,,kv0 ", annKubevirtInterfaces: "ignored"}}}, cfg)
	if err != nil || !reflect.DeepEqual(d.Spec.RerouteInterfaces, []string{"net1", "kv0"}) {
		t.Fatalf("reroute interfaces: %v %v", d.Spec.RerouteInterfaces, err)
	}
}

// The agent's cache keeps a namespace without kubernetes.io/metadata.name
// (it is the name; daemon/kubecache): a selector on it still matches.
func TestAmbientSelectorOnNamespaceName(t *testing.T) {
	cfg := AmbientConfig{Selectors: MustParseSelectors(`- namespaceSelector:
    matchLabels: {kubernetes.io/metadata.name: shop}
`)}
	cached := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}
	if !isAmbient(&corev1.Pod{}, cached, cfg) {
		t.Error("a pod of namespace shop, cached without its name label, is not ambient under a selector on that label")
	}
	if isAmbient(&corev1.Pod{}, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "other"}}, cfg) {
		t.Error("a pod of namespace other is ambient under a selector on shop's name")
	}
}
