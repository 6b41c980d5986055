package policy

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"
)

// A Kube policy whose API server does not answer: what it decides without
// a lookup is all it can decide.
func unreachableKube(t *testing.T) *Kube {
	t.Helper()
	k, _ := newKube(t, &rest.Config{Host: "http://127.0.0.1:1", Timeout: 200 * time.Millisecond}, KubeConfig{
		ExcludeNamespaces: []string{"kube-system"},
		OwnPods:           OwnPods{Namespace: "istio-system", NamePrefix: AgentPodPrefix("sluice-agent-7xk2p")},
		LookupWait:        10 * time.Millisecond,
		Log:               slog.New(slog.DiscardHandler),
	})
	return k
}

func TestKubeSkipsWithoutLookup(t *testing.T) {
	k := unreachableKube(t)
	for _, tc := range []struct {
		pod Pod
		why string
	}{
		{Pod{Namespace: "shop"}, "not a Kubernetes pod"},
		{Pod{Name: "cart"}, "not a Kubernetes pod"},
		{Pod{Namespace: "kube-system", Name: "coredns-1"}, "excluded"},
		{Pod{Namespace: "istio-system", Name: "sluice-agent-abcde"}, "own pod"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		d, err := k.Decide(ctx, tc.pod)
		cancel()
		if err != nil || d.Capture || !strings.Contains(d.Reason, tc.why) {
			t.Errorf("%+v: decision %+v, %v; want pass-through saying %q", tc.pod, d, err, tc.why)
		}
	}
}

// The agent's namespace is not exempt: istiod there is decided (here: looked
// up, which fails, and a failed lookup fails the ADD — never a pass).
func TestKubeAgentNamespaceIsNotExempt(t *testing.T) {
	k := unreachableKube(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	d, err := k.Decide(ctx, Pod{Namespace: "istio-system", Name: "istiod-5d9f-abcde", UID: "u"})
	if err == nil {
		t.Fatalf("decision %+v without the API server: want the lookup's error", d)
	}
}
