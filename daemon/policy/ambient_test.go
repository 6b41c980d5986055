package policy

import (
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
		if got := isAmbient(tc.pod, tc.ns); got != tc.want {
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
	if _, err := decideAmbient(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{annAmbientDNSCapture: "maybe"}}}, cfg); err == nil {
		t.Fatal("non-boolean annotation accepted")
	}
}
