package lifecycletest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluicemesh/sluice/test/harness/nodetest"
)

// rebootPod is a mesh pod the reboot scenario follows.
type rebootPod struct {
	ns, name, kind string
	uid            string
	appID          string        // the app container's ID before the reboot
	back           time.Duration // reboot → running again with a new app container
	failed         string
	evicted        bool
	gone           bool // failed or evicted, counted in an earlier round
}

// Reboot runs scenario 5 on the cluster's first node: with two pods of
// each mesh kind running there, the node reboots (nodetest's Reboot:
// kubelet, containerd, the agent and every container die, /run is
// emptied, the node boots again and every pod gets a new sandbox and
// netns). A prober outside the node dials each pod's app port throughout
// and must never be answered by the app itself; each pod must run again,
// its restarted app's first connection captured, answered through its
// proxy (sidecar) or ztunnel (ambient) again. It fails t on any count and
// records a reboot Count.
func Reboot(t *testing.T, m *Mesh) {
	node := m.Cluster
	pods := m.startRebootPods(t, node.NodeName, "reboot", 2)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	pr := newProber(ctx, t, node)
	go m.watchIPs(ctx, pr, pods)
	m.waitCaptured(t, pr, pods, time.Minute)

	agentID := m.agentNot(t, node.NodeName, "", time.Minute)
	rebooted := time.Now()
	if err := node.Reboot(ctx); err != nil {
		t.Fatal(err)
	}
	m.agentNot(t, node.NodeName, agentID, 3*time.Minute)
	t.Logf("reboot: agent Ready %v after the reboot began", time.Since(rebooted).Round(time.Millisecond))
	m.waitBack(t, pods, rebooted, 3*time.Minute)
	t.Logf("reboot: every pod back %v after the reboot began", time.Since(rebooted).Round(time.Millisecond))
	pr.forget()
	m.waitCaptured(t, pr, pods, time.Minute)
	t.Logf("reboot: every pod captured again %v after the reboot began", time.Since(rebooted).Round(time.Millisecond))
	n := Count{CNI: m.CNI, Scenario: ScenarioReboot, Nodes: len(node.Nodes())}
	var d startDelays
	m.countPods(t, pods, &n, &d)
	n.settle(d, pr, stop)
	judgeReboot(t, n)
	if err := Record(n); err != nil {
		t.Errorf("record reboot: %v", err)
	}
}

// tallyRebootPod adds p's outcome to n: evicted, failed for good, or its
// restarted app's first dial not captured.
func (m *Mesh) tallyRebootPod(t *testing.T, p *rebootPod, n *Count) {
	switch {
	case p.evicted:
		n.Evicted++
		n.Failures = append(n.Failures, fmt.Sprintf("%s pod %s/%s evicted: %s", p.kind, p.ns, p.name, p.failed))
		return
	case p.failed != "":
		n.Failed++
		n.Failures = append(n.Failures, fmt.Sprintf("%s pod %s/%s failed for good: %s", p.kind, p.ns, p.name, p.failed))
		return
	}
	if first := FirstDial(m.Cluster.Logs(p.ns, p.name, "app")); !DialCaptured(first) {
		n.Uncaptured++
		n.Failures = append(n.Failures, fmt.Sprintf("%s pod %s/%s after the reboot: its app's first dial got %q", p.kind, p.ns, p.name, first))
	}
}

// startDelays are the reboot → running again of the pods counted, and how
// many never ran again.
type startDelays struct {
	back  []time.Duration
	never int
}

// countPods adds each pod's outcome to n (tallyRebootPod) and its start
// delay to d.
func (m *Mesh) countPods(t *testing.T, pods []*rebootPod, n *Count, d *startDelays) {
	for _, p := range pods {
		n.Pods++
		n.Kinds = appendNew(n.Kinds, p.kind)
		m.tallyRebootPod(t, p, n)
		switch {
		case p.back != 0:
			d.back = append(d.back, p.back)
		case p.failed != "" || p.evicted:
			d.never++
		}
	}
}

// settle puts d's percentiles into n, stops the prober (stop ends its
// context) and counts what it saw: a probe an app answered itself is a pod
// uncaptured.
func (n *Count) settle(d startDelays, pr *prober, stop func()) {
	p50, p99 := StartPercentiles(d.back, d.never)
	n.StartP50NS, n.StartP99NS = int64(p50), int64(p99)
	stop()
	pr.wg.Wait()
	probes, app, addrs, where := pr.tally()
	n.Probes, n.UncapturedProbes, n.Uncaptured = probes, app, n.Uncaptured+addrs
	if app > 0 {
		n.Failures = append(n.Failures, fmt.Sprintf("the app itself answered the prober %d times, uncaptured: %s", app, strings.Join(where, ", ")))
	}
}

func judgeReboot(t *testing.T, n Count) {
	t.Helper()
	for _, f := range n.Failures {
		t.Error(f)
	}
	t.Logf("reboot %s: pods=%d probes=%d answered by an app=%d; back p50=%s p99=%s", n.CNI, n.Pods, n.Probes,
		n.UncapturedProbes, DelayText(n.StartP50NS), DelayText(n.StartP99NS))
}

func appendNew(s []string, v string) []string {
	for _, x := range s {
		if x == v {
			return s
		}
	}
	return append(s, v)
}

// startRebootPods starts perKind pods of each mesh kind on node, in
// namespaces named prefix-kind, and waits for them.
func (m *Mesh) startRebootPods(t *testing.T, node, prefix string, perKind int) []*rebootPod {
	var pods []*rebootPod
	nss := m.kindNamespaces(t, prefix)
	for _, k := range m.Kinds {
		if k == KindPlain {
			continue
		}
		for i := range perKind {
			pods = append(pods, &rebootPod{ns: nss[k], name: fmt.Sprintf("%s-%d", k, i), kind: k})
		}
	}
	cs := m.Client(t)
	for _, p := range pods {
		got, err := cs.CoreV1().Pods(p.ns).Create(t.Context(), pinned(m.Pod(p.kind, p.name), node), metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("create pod %s/%s: %v", p.ns, p.name, err)
		}
		p.uid = string(got.UID)
	}
	m.awaitRunning(t, pods, 2*time.Minute, "the reboot test's pods running")
	return pods
}

// awaitRunning waits until every one of pods runs, noting its app
// container.
func (m *Mesh) awaitRunning(t *testing.T, pods []*rebootPod, timeout time.Duration, what string) {
	cs := m.Client(t)
	nodetest.Eventually(t, timeout, what, func() error {
		for _, p := range pods {
			got, err := cs.CoreV1().Pods(p.ns).Get(t.Context(), p.name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if !AllRunning(got) {
				return fmt.Errorf("%s/%s: %s", p.ns, p.name, nodetest.PodState(got))
			}
			p.appID = AppID(got)
		}
		return nil
	})
}
