package mesh

import (
	"fmt"
	"testing"
	"time"
)

// An AuthorizationPolicy denying A's service account, enforced by ztunnel
// on B's side, stops every connection from A reaching B's app; deleting it
// lets A through again. Enforcement end to end: A's connections reach
// ztunnel only because sluice captured them.
func TestAuthorizationPolicyDeniesAndDeletingRestores(t *testing.T) {
	zt := requireZtunnel(t)
	mesh := namespace(t, map[string]string{labelDataplane: "ambient"})
	serviceAccount(t, mesh, "client-a")
	b := start(t, mesh, appPod("b", "", "127.0.0.1:1", nil))
	a := start(t, mesh, appPod("a", "client-a", b.Status.PodIP+":8080", nil))
	waitReplies(t, mesh, "a", 3)

	remove := istioObject(t, mesh, "authorizationpolicies", "AuthorizationPolicy", "deny-a", map[string]any{
		"selector": map[string]any{"matchLabels": map[string]string{"app": "b"}},
		"action":   "DENY",
		"rules": []any{map[string]any{"from": []any{map[string]any{"source": map[string]any{
			"principals": []string{"cluster.local/ns/" + mesh + "/sa/client-a"},
		}}}}},
	})
	// Denied once the last 4 dials all failed; from then on, 10 more
	// dials fail and B's app serves A nothing.
	eventually(t, time.Minute, "a denied", func() error {
		d := dials(t, mesh, "a")
		if len(d) < 4 {
			return fmt.Errorf("%d dials", len(d))
		}
		if ok, _ := count(d[len(d)-4:], "app"); ok != 0 {
			return fmt.Errorf("last dials %q", d[len(d)-4:])
		}
		return nil
	})
	before, servedBefore := len(dials(t, mesh, "a")), served(t, mesh, "b", a.Status.PodIP)
	var denied int
	eventually(t, time.Minute, "10 more dials from a", func() error {
		d := dials(t, mesh, "a")[before:]
		if len(d) < 10 {
			return fmt.Errorf("%d dials", len(d))
		}
		ok, failed := count(d, "app")
		if ok != 0 {
			t.Fatalf("a reached b %d times under the deny policy: %q", ok, d)
		}
		denied = failed
		return nil
	})
	if n := served(t, mesh, "b", a.Status.PodIP); n != servedBefore {
		t.Errorf("b served a %d times under the deny policy", n-servedBefore)
	}
	mtls, err := opened(zt, mesh, "a", "b", "mutual_tls")
	if err != nil {
		t.Fatal(err)
	}

	remove()
	after := len(dials(t, mesh, "a"))
	eventually(t, time.Minute, "a to reach b again", func() error {
		if ok, _ := count(dials(t, mesh, "a")[after:], "app"); ok < 3 {
			return fmt.Errorf("%d replies since the policy went: %q", ok, last(dials(t, mesh, "a")))
		}
		return nil
	})
	t.Logf("a -> b: %d dials denied while the policy stood, b served a none of them; %d served before it, with %v mTLS connections opened by ztunnel; replies again after it went", denied, servedBefore, mtls)
}

// waitReplies waits until the pod's app has had n replies.
func waitReplies(t *testing.T, ns, pod string, n int) {
	t.Helper()
	eventually(t, time.Minute, fmt.Sprintf("%d replies to %s/%s", n, ns, pod), func() error {
		d := dials(t, ns, pod)
		if ok, _ := count(d, "app"); ok < n {
			return fmt.Errorf("%d dials, last %q", len(d), last(d))
		}
		return nil
	})
}
