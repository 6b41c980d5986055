package mesh

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// idleFor is how long the mesh is left alone: elapsed time is what is
// under test (the agent once dropped every idle ZDS connection ~10 s
// after the last exchange, then every 5 s).
const idleFor = 3 * time.Minute

// A mesh left idle keeps its one ZDS connection: ztunnel logs no new
// stream, the agent's sluice_ztunnel_connects_total does not move and its
// sluice_ztunnel_connections never leaves 1 (read every second), and the
// agent logs nothing about ztunnel at its level (info).
func TestIdleMeshKeepsOneZDSConnection(t *testing.T) {
	zt := requireZtunnel(t)
	settled(t)
	mesh := namespace(t, map[string]string{labelDataplane: "ambient"})
	start(t, mesh, appPod("idle", "", "127.0.0.1:1", nil))
	agent := readyPod(t, releaseNS, "app="+agentApp, cluster.NodeName, time.Minute)
	eventually(t, time.Minute, "ztunnel to hold the idle pod", func() error {
		got, err := ztunnelWorkloads(zt)
		if err != nil {
			return err
		}
		return sameProtocols(got, map[string]string{mesh + "/idle": "HBONE"})
	})

	from := time.Now()
	streams := ztunnelStreams(t, zt.Name, from.Add(-time.Hour), from)
	connects, err := agentMetric("sluice_ztunnel_connects_total")
	if err != nil {
		t.Fatal(err)
	}
	samples, drops := 0, 0
	for deadline := from.Add(idleFor); time.Now().Before(deadline); time.Sleep(time.Second) {
		n, err := agentMetric("sluice_ztunnel_connections")
		if err != nil {
			t.Fatal(err)
		}
		samples++
		if n != 1 {
			drops++
			t.Errorf("%v: sluice_ztunnel_connections = %v", time.Since(from).Round(time.Second), n)
		}
	}
	to := time.Now()
	connectsAfter, err := agentMetric("sluice_ztunnel_connects_total")
	if err != nil {
		t.Fatal(err)
	}
	if connectsAfter != connects {
		t.Errorf("sluice_ztunnel_connects_total went from %v to %v while idle: ztunnel reconnected", connects, connectsAfter)
	}
	if n := ztunnelStreams(t, zt.Name, from, to); n != 0 {
		t.Errorf("ztunnel opened %d new ZDS streams while idle (%d before)", n, streams)
	}
	var loud []string
	for _, l := range timedLogs(t, releaseNS, agent.Name, "sluice-agent") {
		if within(l.at, from, to) && strings.Contains(strings.ToLower(l.text), "ztunnel") {
			loud = append(loud, l.text)
		}
	}
	if len(loud) != 0 {
		t.Errorf("the agent logged about ztunnel while idle:\n%s", strings.Join(loud, "\n"))
	}
	t.Logf("idle %v: %d samples of sluice_ztunnel_connections, %d not 1; sluice_ztunnel_connects_total %v then %v; ztunnel streams before: %d",
		to.Sub(from).Round(time.Second), samples, drops, connects, connectsAfter, streams)
}

// ztunnelStreams counts the ZDS streams ztunnel started in [from, to)
// ("handling new stream", one per connection to the agent).
func ztunnelStreams(t testing.TB, pod string, from, to time.Time) int {
	t.Helper()
	n := 0
	for _, l := range timedLogs(t, istioNS, pod, "istio-proxy") {
		if within(l.at, from, to) && strings.Contains(l.text, "handling new stream") {
			n++
		}
	}
	return n
}

// settled waits until no namespace is being deleted: the earlier tests'
// pods are gone and their DELs done, so what follows is quiet.
func settled(t *testing.T) {
	t.Helper()
	eventually(t, 2*time.Minute, "no namespace terminating", func() error {
		l, err := client(t).CoreV1().Namespaces().List(t.Context(), metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, ns := range l.Items {
			if ns.Status.Phase == corev1.NamespaceTerminating {
				return fmt.Errorf("%s terminating", ns.Name)
			}
		}
		return nil
	})
}
