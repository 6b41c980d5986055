package late

import (
	"net/netip"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestSettled(t *testing.T) {
	running := func(mut func(*corev1.Pod)) *corev1.Pod {
		p := &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.1.0.5",
			PodIPs: []corev1.PodIP{{IP: "10.1.0.5"}, {IP: "fd00::5"}}}}
		if mut != nil {
			mut(p)
		}
		return p
	}
	now := metav1.Now()
	for name, tc := range map[string]struct {
		pod  *corev1.Pod
		want bool
	}{
		"running with an IP":   {running(nil), true},
		"pending with an IP":   {running(func(p *corev1.Pod) { p.Status.Phase = corev1.PodPending }), true},
		"only podIP":           {running(func(p *corev1.Pod) { p.Status.PodIPs = nil }), true},
		"no IP yet (ADD runs)": {running(func(p *corev1.Pod) { p.Status.PodIP, p.Status.PodIPs = "", nil }), false},
		"garbage IP":           {running(func(p *corev1.Pod) { p.Status.PodIP, p.Status.PodIPs = "x", nil }), false},
		"host network":         {running(func(p *corev1.Pod) { p.Spec.HostNetwork = true }), false},
		"terminating":          {running(func(p *corev1.Pod) { p.DeletionTimestamp = &now }), false},
		"succeeded":            {running(func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }), false},
		"failed":               {running(func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed }), false},
	} {
		if got := Settled(tc.pod); got != tc.want {
			t.Errorf("%s: settled = %v, want %v", name, got, tc.want)
		}
	}
	got := hostPrefixes(PodIPs(running(nil)))
	if want := []netip.Prefix{netip.MustParsePrefix("10.1.0.5/32"), netip.MustParsePrefix("fd00::5/128")}; !reflect.DeepEqual(got, want) {
		t.Errorf("journal IPs %v, want %v", got, want)
	}
	if ips := PodIPs(running(nil)); !reflect.DeepEqual(ips, []netip.Addr{netip.MustParseAddr("10.1.0.5"), netip.MustParseAddr("fd00::5")}) {
		t.Errorf("podIPs = %v: want both, once each", ips)
	}
}

func TestContainerIDIsAValidCNIID(t *testing.T) {
	id := ContainerID("3f2a9c1e-1b2c-4d5e-8f90-0123456789ab")
	for i, c := range id {
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || (c != '-' && c != '_' && c != '.')) {
			t.Fatalf("%q: %q at %d breaks the CNI container id rules", id, c, i)
		}
	}
}
