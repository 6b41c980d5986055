package events

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/sluicemesh/sluice/daemon/policy"
	"github.com/sluicemesh/sluice/daemon/redirect"
)

// The reasons policy gives today, each with the label it must count under.
// A reason that falls to "other" is still counted, but an operator loses
// the one alert worth having (istio-init), so each is pinned here.
func TestPassReason(t *testing.T) {
	for reason, want := range map[string]string{
		"namespace kube-system is excluded":                                             PassExcludedNamespace,
		"host-network pod: it shares the node's network namespace":                      PassHostNetwork,
		"sidecar.istio.io/inject is false":                                              PassInjectDisabled,
		"ambient pod (istio.io/dataplane-mode=ambient), and ambient is off (--ambient)": PassAmbientOff,
		"not injected: no sidecar.istio.io/status annotation":                           PassNotInjected,
		"has an istio-init container: capture is done inside the pod":                   PassIstioInit,
		"no istio-proxy container":                                                      PassNoProxy,
		"DISABLE_ENVOY is set on istio-proxy":                                           PassEnvoyDisabled,
		"istio-proxy runs as proxy type router":                                         PassNotSidecar,
		"something new":                                                                 PassOther,
	} {
		if got := PassReason(reason); got != want {
			t.Errorf("PassReason(%q) = %q, want %q", reason, got, want)
		}
	}
}

func TestDecisionsLogAndCount(t *testing.T) {
	var buf bytes.Buffer
	d := NewDecisions(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	for _, r := range PassReasons {
		if n, ok := d.PassedThrough()[r]; !ok || n != 0 {
			t.Errorf("before any ADD, %s = %d (present %v), want 0 and present", r, n, ok)
		}
	}
	pod := policy.Pod{Namespace: "shop", Name: "cart", UID: "u1"}
	d.Added(pod, "c1", "req1", policy.Decision{Capture: true, Spec: redirect.Spec{Mode: redirect.ModeSidecar}, Reason: "istio sidecar",
		Inputs: []string{"annotation x: y"}}, nil)
	init := policy.Decision{Reason: "has an istio-init container: capture is done inside the pod"}
	d.Added(pod, "c2", "req2", init, nil)
	d.Added(pod, "c3", "req3", init, nil) // a second sandbox of the same pod
	d.Added(policy.Pod{Namespace: "shop", Name: "db", UID: "u2"}, "c4", "req4", init, nil)
	d.Added(pod, "c5", "req5", policy.Decision{}, errors.New("netns gone"))

	out := buf.String()
	for _, want := range []string{
		`msg="pod enrolled" pod=shop/cart container_id=c1 request_id=req1 mode=sidecar reason="istio sidecar"`,
		`level=DEBUG msg="policy inputs"`,
		`msg="pod passed through" pod=shop/cart container_id=c2 request_id=req2 reason="has an istio-init container`,
		`reason_code=istio-init`,
		`level=WARN msg="pod not started: capture could not be set up" pod=shop/cart container_id=c5 request_id=req5 err="netns gone"`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %s:\n%s", want, out)
		}
	}
	if n := strings.Count(out, IstioInitMessage); n != 2 {
		t.Errorf("istio-init warning logged %d times for 2 pods, want once per pod:\n%s", n, out)
	}
	if got := d.PassedThrough()[PassIstioInit]; got != 3 {
		t.Errorf("passed through istio-init = %d, want 3 (every ADD)", got)
	}
	if got := d.IstioInitPods(); got != 2 {
		t.Errorf("IstioInitPods = %d, want 2", got)
	}
}

// A nil Decisions (tests, tools) records nothing and does not panic.
func TestNilDecisions(t *testing.T) {
	var d *Decisions
	d.Added(policy.Pod{}, "c", "r", policy.Decision{}, nil)
}
