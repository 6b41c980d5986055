package peer

import (
	"strings"
	"testing"
	"time"
)

// A pod with the injector's metadata starts through the CNI chain into
// istio-cni's plugin with Istio's redirection in its netns, and its
// outbound TCP lands on the stand-in proxy's 15001; an uninjected pod next
// to it gets no rules.
func TestIstioCNISidecar(t *testing.T) {
	requireAgent(t)
	ns := namespace(t)
	s := cluster.RunningPod(t, ns, cluster.CreatePod(t, ns, sidecarPod("injected", unreachable)).Name, time.Minute)
	if err := captured(podRules(t, s)); err != nil {
		t.Fatalf("injected pod: %v", err)
	}
	cluster.LogShows(t, ns, s.Name, "app", 30*time.Second,
		"app dial "+unreachable+": proxy captured on :15001 original dst "+unreachable)

	u := cluster.RunningPod(t, ns, cluster.CreatePod(t, ns, plainPod("plain", unreachable)).Name, time.Minute)
	if rules := podRules(t, u); strings.Contains(rules, "ISTIO") {
		t.Fatalf("uninjected pod has Istio rules:\n%s", rules)
	}
}
