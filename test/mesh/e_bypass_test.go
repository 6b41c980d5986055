package mesh

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicemesh/sluice/test/harness/nodetest"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// No bypass over time: with A -> B running and B's namespace in STRICT
// mTLS, ztunnel's pod is replaced (its DaemonSet starts the new one while
// the old drains), ztunnel then crashes (SIGKILL; the kubelet restarts
// it), sluice's agent is restarted, and sluice is upgraded with helm to a
// new image. No connection ever reaches B's
// app without mTLS: a pod outside the mesh dialling B the whole time never
// gets B's reply (refused while no ztunnel runs, turned away by ztunnel
// otherwise), B's app serves nothing while no ztunnel runs, and A's
// traffic resumes by itself after each step.
func TestNoBypassOverTime(t *testing.T) {
	requireZtunnel(t)
	mesh := namespace(t, map[string]string{labelDataplane: "ambient"})
	plainNS := namespace(t, nil)
	istioObject(t, mesh, "peerauthentications", "PeerAuthentication", "strict", map[string]any{
		"mtls": map[string]any{"mode": "STRICT"},
	})
	b := start(t, mesh, appPod("b", "", "127.0.0.1:1", nil))
	target := b.Status.PodIP + ":8080"
	a := start(t, mesh, appPod("a", "", target, nil))
	start(t, plainNS, appPod("outsider", "", target, nil))
	begin := time.Now()
	waitReplies(t, mesh, "a", 3)

	replaceZtunnel(t)
	waitRepliesSince(t, mesh, "a", time.Now(), 3)

	// Twice: the kubelet restarts a crashed container at once the first
	// time and after a back-off the second, a longer time without ztunnel.
	var absentFor time.Duration
	var outsiderAbsent, refusedAbsent, aAbsent int
	for range 2 {
		killed, back := crashZtunnel(t)
		absentFor += back.Sub(killed)
		o, r, n := noZtunnelWindow(t, mesh, plainNS, a.Status.PodIP, killed, back)
		outsiderAbsent, refusedAbsent, aAbsent = outsiderAbsent+o, refusedAbsent+r, aAbsent+n
		waitRepliesSince(t, mesh, "a", back, 3)
	}
	if refusedAbsent == 0 {
		t.Errorf("no dial of the outsider's was refused in %v without ztunnel", absentFor)
	}
	t.Logf("no ztunnel for %v in all: outsider's dials %d, refused %d; a's dials %d, none answered",
		absentFor.Round(time.Millisecond), outsiderAbsent, refusedAbsent, aAbsent)

	agentDown := time.Now()
	restartAgent(t)
	waitRepliesSince(t, mesh, "a", time.Now(), 3)
	across, _ := count(dialResults(t, mesh, "a", agentDown, time.Now()), "app")
	upgradeStart := time.Now()
	upgradeSluice(t)
	waitRepliesSince(t, mesh, "a", time.Now(), 3)
	acrossUpgrade, _ := count(dialResults(t, mesh, "a", upgradeStart, time.Now()), "app")

	end := time.Now()
	all := dialResults(t, plainNS, "outsider", begin, end)
	if ok, _ := count(all, "app"); ok != 0 {
		t.Errorf("outsider reached b's app %d times in plain text", ok)
	}
	ok, failed := count(dialResults(t, mesh, "a", begin, end), "app")
	answered, _ := count(all, "app")
	t.Logf("a -> b: %d replies, %d failed dials in all, %d replies across the agent's restart, %d across the helm upgrade; outsider: %d dials, %d answered by b's app",
		ok, failed, across, acrossUpgrade, len(all), answered)
}

// noZtunnelWindow checks [killed, back), when no ztunnel ran: every dial
// the outsider made was refused but for one ztunnel took just before it
// died (that one ends with a reset), none was answered, and B's app served
// A nothing. It returns the outsider's dials, how many were refused, and
// A's dials.
func noZtunnelWindow(t *testing.T, mesh, plainNS, aIP string, killed, back time.Time) (outsider, refusedN, aDials int) {
	t.Helper()
	absent := dialResults(t, plainNS, "outsider", killed, back)
	for _, r := range absent {
		if refused(r) {
			refusedN++
		}
	}
	if ok, _ := count(absent, "app"); ok != 0 || refusedN < len(absent)-1 {
		t.Errorf("outsider's dials while no ztunnel ran: %q, want refused", absent)
	}
	if n := servedIn(t, mesh, "b", aIP, killed, back); n != 0 {
		t.Errorf("b served a %d times while no ztunnel ran", n)
	}
	aResults := dialResults(t, mesh, "a", killed, back)
	if ok, _ := count(aResults, "app"); ok != 0 {
		t.Errorf("a had %d replies while no ztunnel ran", ok)
	}
	return len(absent), refusedN, len(aResults)
}

// replaceZtunnel deletes ztunnel's pod and waits until the DaemonSet's new
// pod is Ready and connected to the agent, and the old one is gone.
func replaceZtunnel(t *testing.T) {
	t.Helper()
	cs := client(t)
	old := readyPod(t, istioNS, "app=ztunnel", cluster.NodeName, time.Minute)
	if err := cs.CoreV1().Pods(istioNS).Delete(t.Context(), old.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete ztunnel pod: %v", err)
	}
	eventually(t, 2*time.Minute, "the old ztunnel pod gone", func() error {
		if _, err := cs.CoreV1().Pods(istioNS).Get(t.Context(), old.Name, metav1.GetOptions{}); err == nil {
			return fmt.Errorf("%s still there", old.Name)
		}
		return nil
	})
	readyPod(t, istioNS, "app=ztunnel", cluster.NodeName, 2*time.Minute)
	waitZtunnelConnected(t)
}

// crashZtunnel kills ztunnel's process and waits for the kubelet's
// restart of it to connect to the agent. It returns the window in which no
// ztunnel ran on the node: from when its process was seen gone to when the
// agent logged the restarted one's connection (the agent's own clock; its
// gauge cannot say, as the restart connects before the agent's keepalive
// finds the dead connection).
func crashZtunnel(t *testing.T) (killed, back time.Time) {
	t.Helper()
	zt := readyPod(t, istioNS, "app=ztunnel", cluster.NodeName, time.Minute)
	agent := readyPod(t, releaseNS, "app="+agentApp, cluster.NodeName, time.Minute)
	pids, err := containerPIDs(zt)
	if err != nil {
		t.Fatal(err)
	}
	for _, pid := range pids {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatalf("kill ztunnel's process %d: %v", pid, err)
		}
	}
	eventually(t, 30*time.Second, "ztunnel's processes gone", func() error {
		for _, pid := range pids {
			if syscall.Kill(pid, 0) == nil {
				return fmt.Errorf("process %d still there", pid)
			}
		}
		killed = time.Now()
		return nil
	})
	eventually(t, 2*time.Minute, "the restarted ztunnel connected to the agent", func() error {
		for _, l := range timedLogs(t, releaseNS, agent.Name, "sluice-agent") {
			if at, ok := agentLogTime(l.text); ok && at.After(killed) && strings.Contains(l.text, `msg="ztunnel connected"`) {
				back = at
				return nil
			}
		}
		return fmt.Errorf("no ztunnel connected since %v", killed)
	})
	return killed, back
}

// agentLogTime is the time= field of an agent log line (text format).
func agentLogTime(line string) (time.Time, bool) {
	v, ok := strings.CutPrefix(line, "time=")
	if !ok {
		return time.Time{}, false
	}
	v, _, _ = strings.Cut(v, " ")
	at, err := time.Parse(time.RFC3339Nano, v)
	return at, err == nil
}

// restartAgent deletes sluice's agent pod and waits for its replacement
// to be Ready with ztunnel connected again.
func restartAgent(t *testing.T) {
	t.Helper()
	old := readyPod(t, releaseNS, "app="+agentApp, cluster.NodeName, time.Minute)
	if err := client(t).CoreV1().Pods(releaseNS).Delete(context.Background(), old.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete agent pod: %v", err)
	}
	eventually(t, 2*time.Minute, "a new Ready agent", func() error {
		p, err := onePod(t, releaseNS, "app="+agentApp, cluster.NodeName)
		if err != nil {
			return err
		}
		if p.Name == old.Name || !nodetest.PodReady(p) {
			return fmt.Errorf("%s: %s", p.Name, nodetest.PodState(p))
		}
		return nil
	})
	waitZtunnelConnected(t)
}

// waitZtunnelConnected waits until the agent has exactly one ztunnel
// connected.
func waitZtunnelConnected(t *testing.T) {
	t.Helper()
	eventually(t, time.Minute, "one ztunnel connected to the agent", func() error {
		n, err := agentMetric("sluice_ztunnel_connections")
		if err == nil && n != 1 {
			err = fmt.Errorf("%v ztunnel connections", n)
		}
		return err
	})
}

// waitRepliesSince waits for n replies to the pod's dials after since.
func waitRepliesSince(t *testing.T, ns, pod string, since time.Time, n int) {
	t.Helper()
	eventually(t, 2*time.Minute, fmt.Sprintf("%d replies to %s/%s", n, ns, pod), func() error {
		d := dialResults(t, ns, pod, since, time.Now().Add(time.Hour))
		if ok, _ := count(d, "app"); ok < n {
			return fmt.Errorf("%d dials, last %q", len(d), last(d))
		}
		return nil
	})
}
