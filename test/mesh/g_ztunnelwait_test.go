package mesh

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// An ambient pod created while no ztunnel runs on the node waits for the
// real ztunnel in its ADD (--ztunnel-connect-wait) and starts once
// ztunnel is back, with no failed sandbox: the ADD waits before it takes
// any lock, then hands the pod to the ztunnel that connected, and its
// dials reach b over HBONE. Before, the ADD failed at once and the pod
// waited for the kubelet's sandbox backoff.
func TestAmbientPodWaitsForZtunnel(t *testing.T) {
	requireZtunnel(t)
	mesh := namespace(t, map[string]string{labelDataplane: "ambient"})
	b := start(t, mesh, appPod("b", "", "127.0.0.1:1", nil))
	back := ztunnelAway(t)

	cs := client(t)
	if _, err := cs.CoreV1().Pods(mesh).Create(t.Context(), appPod("c", "", b.Status.PodIP+":8080", nil), metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod c: %v", err)
	}
	agent := readyPod(t, releaseNS, "app="+agentApp, cluster.NodeName, time.Minute)
	waiting := `msg="no ztunnel connected: the ADD waits for one"`
	eventually(t, time.Minute, "c's ADD waiting for ztunnel", func() error {
		if !agentLogged(t, agent.Name, waiting, "pod="+mesh+"/c ") {
			return fmt.Errorf("the agent has not logged %s for %s/c", waiting, mesh)
		}
		return nil
	})
	back()
	c := running(t, mesh, "c")
	if !agentLogged(t, agent.Name, `msg="ztunnel connected: the waiting ADD goes on"`, "uid="+string(c.UID)) {
		t.Errorf("the agent did not log c's ADD going on once ztunnel connected")
	}
	// Reported, not asserted: from ztunnel's connection to the ADD's
	// answer, by the agent's own clock.
	var connected, answered time.Time
	for _, l := range timedLogs(t, releaseNS, agent.Name, "sluice-agent") {
		at, ok := agentLogTime(l.text)
		switch {
		case !ok:
		case all(l.text, []string{`msg="ztunnel connected: the waiting ADD goes on"`, "uid=" + string(c.UID)}):
			connected = at
		case !connected.IsZero() && all(l.text, []string{"msg=call", "method=/sluice.v1.CNI/Add", "code=OK", "pod=" + mesh + "/c"}):
			answered = at
		}
	}
	t.Logf("c's ADD answered %v after ztunnel connected", answered.Sub(connected).Round(time.Millisecond))
	evs, err := cs.CoreV1().Events(mesh).List(t.Context(), metav1.ListOptions{FieldSelector: "involvedObject.name=c"})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs.Items {
		if e.Reason == "FailedCreatePodSandBox" || e.Reason == "CaptureFailed" {
			t.Errorf("c's sandbox failed while it waited for ztunnel: %s: %s", e.Reason, e.Message)
		}
	}
	waitReplies(t, mesh, "c", 3)
	readyPod(t, istioNS, "app=ztunnel", cluster.NodeName, 2*time.Minute)
	waitZtunnelConnected(t)
}

// agentLogged says whether one line of the agent's log holds every part.
func agentLogged(t *testing.T, agent string, parts ...string) bool {
	t.Helper()
	for _, l := range timedLogs(t, releaseNS, agent, "sluice-agent") {
		if all(l.text, parts) {
			return true
		}
	}
	return false
}

func all(s string, parts []string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

// ztunnelAway takes ztunnel off the node (its DaemonSet's pods select a
// node label none has; the pod is deleted without its drain) and waits
// until the agent has no ztunnel connected. back puts the DaemonSet as it
// was; the caller waits for what it needs. Cleanup puts it back too, if
// the test ended before back (its context is cancelled by then, so the
// patch has its own).
func ztunnelAway(t *testing.T) (back func()) {
	t.Helper()
	cs := client(t)
	const key = "sluice.test/no-ztunnel-here"
	patch := func(v any) {
		t.Helper()
		body, _ := json.Marshal(map[string]any{"spec": map[string]any{"template": map[string]any{"spec": map[string]any{
			"nodeSelector": map[string]any{key: v}}}}})
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := cs.AppsV1().DaemonSets(istioNS).Patch(ctx, "ztunnel", types.StrategicMergePatchType, body, metav1.PatchOptions{}); err != nil {
			t.Errorf("patch the ztunnel DaemonSet: %v", err)
		}
	}
	old := readyPod(t, istioNS, "app=ztunnel", cluster.NodeName, time.Minute)
	patch("true")
	zero := int64(0)
	_ = cs.CoreV1().Pods(istioNS).Delete(t.Context(), old.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	eventually(t, 2*time.Minute, "no ztunnel connected to the agent", func() error {
		n, err := agentMetric("sluice_ztunnel_connections")
		if err == nil && n != 0 {
			err = fmt.Errorf("%v ztunnel connections", n)
		}
		return err
	})
	done := false
	back = func() {
		if !done {
			done = true
			patch(nil)
		}
	}
	t.Cleanup(back)
	return back
}
