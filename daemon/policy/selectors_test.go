package policy

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluicemesh/sluice/daemon/redirect"
)

func TestDefaultSelectors(t *testing.T) {
	pod := func(labels map[string]string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Labels: labels}}
	}
	mode := func(v string) map[string]string { return map[string]string{labelDataplaneMode: v} }
	for _, tc := range []struct {
		name   string
		pod    *corev1.Pod
		nsLbls map[string]string
		want   bool
	}{
		{"pod label", pod(mode("ambient")), nil, true},
		{"namespace label", pod(nil), mode("ambient"), true},
		{"another pod value in an ambient namespace", pod(mode("sidecar")), mode("ambient"), true},
		{"pod opts out", pod(mode("none")), mode("ambient"), false},
		{"pod label wins over a none namespace", pod(mode("ambient")), mode("none"), true},
		{"nothing", pod(nil), nil, false},
	} {
		if got := defaultSelectors.Matches(tc.pod, tc.nsLbls); got != tc.want {
			t.Errorf("%s: Matches = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestParseSelectors(t *testing.T) {
	s, err := ParseSelectors(`[{"podSelector":{"matchLabels":{"team":"a"}}}]`)
	if err != nil {
		t.Fatal(err)
	}
	team := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"team": "a"}}}
	if !s.Matches(team, nil) || s.Matches(&corev1.Pod{}, nil) {
		t.Error("JSON selector: want pods with team=a only")
	}
	sidecar := team.DeepCopy()
	sidecar.Annotations = map[string]string{annSidecarStatus: "{}"}
	if s.Matches(sidecar, nil) {
		t.Error("a pod with a sidecar matched")
	}
	for _, bad := range []string{
		"- podSelector: {matchLabels: {a: b}}\n  podSelecter: {}", // a typo would widen the selector to every pod
		"- podSelector: {matchExpressions: [{key: a, operator: Maybe}]}",
		"not a list",
	} {
		if _, err := ParseSelectors(bad); err == nil || !strings.Contains(err.Error(), "selector") {
			t.Errorf("ParseSelectors(%q) = %v, want an error", bad, err)
		}
	}
	if s, err := ParseSelectors(""); err != nil || s.Matches(team, nil) {
		t.Errorf("no selectors: %v, want none to match", err)
	}
}

func TestStaticExcludesNamespaces(t *testing.T) {
	s, err := NewStatic(redirect.DefaultSpec(), "", "kube-system")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		pod  Pod
		want bool
	}{{Pod{Namespace: "kube-system", Name: "dns"}, false}, {Pod{Namespace: "shop", Name: "cart"}, true}, {Pod{}, true}} {
		d, err := s.Decide(context.Background(), tc.pod)
		if err != nil || d.Capture != tc.want {
			t.Errorf("%+v: capture %v (%s), want %v", tc.pod, d.Capture, d.Reason, tc.want)
		}
	}
}

func TestOwnPods(t *testing.T) {
	if got := AgentPodPrefix("sluice-agent-x7k2p"); got != "sluice-agent-" {
		t.Errorf("AgentPodPrefix = %q", got)
	}
	if got := AgentPodPrefix("agent"); got != "" {
		t.Errorf("AgentPodPrefix(no suffix) = %q, want none", got)
	}
	own := OwnPods{Namespace: "istio-system", NamePrefix: "sluice-agent-"}
	for _, tc := range []struct {
		pod  Pod
		want bool
	}{
		{Pod{Namespace: "istio-system", Name: "sluice-agent-abcde"}, true},
		{Pod{Namespace: "istio-system", Name: "istiod-5d9f-abcde"}, false},
		{Pod{Namespace: "shop", Name: "sluice-agent-abcde"}, false},
	} {
		if got := own.Match(tc.pod); got != tc.want {
			t.Errorf("Match(%+v) = %v, want %v", tc.pod, got, tc.want)
		}
	}
	if (OwnPods{}).Match(Pod{Namespace: "", Name: "x"}) {
		t.Error("the zero OwnPods matched a pod")
	}
}
