package lifecycletest

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluicemesh/sluice/test/harness/nodetest"
	"github.com/sluicemesh/sluice/test/harness/nstest"
)

// BurstMaxPods is the test node's maxPods for make test's reboot burst;
// make bench sets the kubelet's default, 110 (SLUICE_BURST_MAX_PODS).
const BurstMaxPods = 40

// RebootBurst fills the cluster's first node to maxPods with mesh pods
// (sidecar and ambient in turn, beside what already runs there) and
// reboots it: every pod's sandbox is made again at once, the burst a
// rebooted node puts to its CNI (istio-cni's users report deadlines
// missed and retries). It holds the same rule as Reboot, from the pods'
// side, and more: no FailedCreatePodSandBox Event for any of them after
// the reboot. queueDepth, when not nil, reads the node's agent's ADD queue
// depth; its largest value during the burst is logged. The node's maxPods
// is set before and put back after, each through a reboot.
func RebootBurst(t *testing.T, m *Mesh, maxPods int, queueDepth func() (float64, error)) {
	node := m.Cluster
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	setMaxPods(t, m, maxPods)
	t.Cleanup(func() { setMaxPods(t, m, 0) })
	free := maxPods - m.podsOn(t, node.NodeName)
	kinds := 0
	for _, k := range m.Kinds {
		if k != KindPlain {
			kinds++
		}
	}
	pods := m.startRebootPods(t, node.NodeName, "reboot-burst", free/kinds)
	pr := newProber(ctx, t, node)
	go m.watchIPs(ctx, pr, pods)
	m.waitCaptured(t, pr, pods, 3*time.Minute)

	agentID := m.agentNot(t, node.NodeName, "", time.Minute)
	rebooted := time.Now()
	if err := node.Reboot(ctx); err != nil {
		t.Fatal(err)
	}
	depth := watchMax(ctx, queueDepth)
	m.agentNot(t, node.NodeName, agentID, 3*time.Minute)
	m.waitBack(t, pods, rebooted, 5*time.Minute)
	t.Logf("reboot burst: %d pods back %v after the reboot began", len(pods), time.Since(rebooted).Round(time.Millisecond))
	pr.forget()
	m.waitCaptured(t, pr, pods, 3*time.Minute)
	n := Count{CNI: m.CNI, Scenario: ScenarioRebootBurst, Nodes: len(node.Nodes())}
	var d startDelays
	m.countPods(t, pods, &n, &d)
	failed := m.failedSandboxes(t, pods, rebooted)
	n.Failed += len(failed)
	for _, f := range failed {
		n.Failures = append(n.Failures, "failed sandbox: "+f)
	}
	n.settle(d, pr, stop)
	t.Logf("figure: reboot burst (%s): maxPods %d, %d mesh pods re-created at once, %d uncaptured, %d failed sandboxes, largest ADD queue %s",
		m.CNI, maxPods, len(pods), n.Uncaptured, len(failed), depth())
	judgeReboot(t, n)
	if err := Record(n); err != nil {
		t.Errorf("record the reboot burst: %v", err)
	}
}

// setMaxPods sets the first node's maxPods (0: the default) and reboots it
// for the kubelet to read it, then waits for its agent.
func setMaxPods(t *testing.T, m *Mesh, n int) {
	node := m.Cluster
	if err := node.SetMaxPods(n); err != nil {
		t.Fatal(err)
	}
	agentID := m.agentNot(t, node.NodeName, "", time.Minute)
	if err := node.Reboot(context.Background()); err != nil {
		t.Fatal(err)
	}
	m.agentNot(t, node.NodeName, agentID, 3*time.Minute)
}

// podsOn counts the pods bound to node that hold a place under maxPods:
// every one not finished.
func (m *Mesh) podsOn(t *testing.T, node string) int {
	l, err := m.Client(t).CoreV1().Pods("").List(t.Context(), metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, p := range l.Items {
		if p.Status.Phase != "Succeeded" && p.Status.Phase != "Failed" {
			n++
		}
	}
	return n
}

// failedSandboxes lists the FailedCreatePodSandBox Events of pods since.
func (m *Mesh) failedSandboxes(t *testing.T, pods []*rebootPod, since time.Time) []string {
	cs := m.Client(t)
	var out []string
	seen := map[string]bool{}
	for _, p := range pods {
		if seen[p.ns] {
			continue
		}
		seen[p.ns] = true
		l, err := cs.CoreV1().Events(p.ns).List(t.Context(), metav1.ListOptions{FieldSelector: "reason=FailedCreatePodSandBox"})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range l.Items {
			if last := e.LastTimestamp.Time; last.IsZero() || !last.Before(since.Truncate(time.Second)) {
				out = append(out, fmt.Sprintf("%s/%s: %s", p.ns, e.InvolvedObject.Name, e.Message))
			}
		}
	}
	return out
}

// watchMax polls read every 100 ms until ctx ends; the returned func gives
// the largest value seen so far, or why there is none.
func watchMax(ctx context.Context, read func() (float64, error)) func() string {
	if read == nil {
		return func() string { return "not read" }
	}
	var mu sync.Mutex
	largest, reads, lastErr := 0.0, 0, error(nil)
	go func() {
		for tick := time.NewTicker(100 * time.Millisecond); ; {
			v, err := read()
			mu.Lock()
			if err == nil {
				reads++
				largest = max(largest, v)
			} else {
				lastErr = err
			}
			mu.Unlock()
			select {
			case <-ctx.Done():
				tick.Stop()
				return
			case <-tick.C:
			}
		}
	}()
	return func() string {
		mu.Lock()
		defer mu.Unlock()
		if reads == 0 {
			return fmt.Sprintf("not read (%v)", lastErr)
		}
		return fmt.Sprintf("%g (%d reads)", largest, reads)
	}
}

// AgentMetric reads one unlabelled metric from the agent's health port on
// node, dialled from inside the node's network namespace.
func AgentMetric(node *nodetest.Cluster, port int, name string) (float64, error) {
	ns := &nstest.NS{Name: "node", Path: node.NetnsPath()}
	c := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		DisableKeepAlives: true,
		DialContext: func(_ context.Context, network, addr string) (net.Conn, error) {
			return ns.Dial(network, addr, time.Second)
		},
	}}
	resp, err := c.Get(fmt.Sprintf("http://%s/metrics", net.JoinHostPort(node.NodeIP, strconv.Itoa(port))))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, name+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return 0, fmt.Errorf("the agent's metrics have no %s", name)
}
