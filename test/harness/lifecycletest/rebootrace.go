package lifecycletest

import (
	"context"
	"fmt"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluicemesh/sluice/test/harness/nodetest"
)

// Racing-primary reboot sizes: make test runs RaceReboots reboots of a
// node holding RacePods mesh pods; make bench sets more reboots
// (SLUICE_REBOOT_RACE_REBOOTS).
const (
	RacePods    = 20
	RaceReboots = 2
	// raceRewrite is how often the stand-in primary rewrites its conflist
	// while the node boots.
	raceRewrite = 200 * time.Millisecond
	// raceAfterReady is how long the rewrites go on once the agent is
	// Ready again: past +2 s of its start, the far end of the window the
	// issue's primary CNIs land in.
	raceAfterReady = 3 * time.Second
	// raceBoot bounds the rewrites from the node's kubelet coming back:
	// an agent whose readiness follows its entry in the primary's file
	// (istio-cni's does) may never be Ready while the file is rewritten
	// every 200 ms, and a real primary CNI settles after its boot.
	raceBoot = 20 * time.Second
)

// RebootRacingPrimary reboots the cluster's first node reboots times while
// a stand-in primary CNI (nodetest.RacingPrimary) rewrites its conflist,
// without any mesh CNI's entry, every 200 ms from the moment the node goes
// down until 3 s after the mesh agent is Ready again (at most 20 s after
// the node is back), and once more while the node runs: as Cilium and Calico write theirs at boot, at every
// offset around the agent's start (−2 s to +2 s and beyond) rather than at
// one. RacePods mesh pods (half sidecar, half ambient where the mesh has
// both) run there, their apps dialling out the moment they start.
// Counted from the pods' side only: each restarted app's first connection
// must be captured (answered by its proxy or ztunnel with the original
// destination), and a prober outside the node must never be answered by
// an app itself. A pod that goes is counted once, in its round, and
// created anew before the next (replaceGone). It fails t on any count and
// records the total as scenario.
func RebootRacingPrimary(t *testing.T, m *Mesh, scenario string, reboots int) {
	node := m.Cluster
	kinds := 0
	for _, k := range m.Kinds {
		if k != KindPlain {
			kinds++
		}
	}
	pods := m.startRebootPods(t, node.NodeName, scenario, RacePods/kinds)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	pr := newProber(ctx, t, node)
	go m.watchIPs(ctx, pr, pods)
	m.waitCaptured(t, pr, pods, 2*time.Minute)

	n := Count{CNI: m.CNI, Scenario: scenario, Nodes: len(node.Nodes())}
	var d startDelays
	rewrites := 0
	agentID := m.agentNot(t, node.NodeName, "", time.Minute)
	for round := range reboots {
		race := node.RacePrimary(raceRewrite)
		rebooted := time.Now()
		if err := node.Reboot(ctx); err != nil {
			race.Stop()
			t.Fatal(err)
		}
		up := time.Now()
		settle := time.AfterFunc(raceBoot, func() { race.Stop() })
		agentID = m.agentNot(t, node.NodeName, agentID, 3*time.Minute)
		ready := time.Since(up)
		time.Sleep(raceAfterReady) // the rewrites go on past the agent's start
		settle.Stop()
		r, err := race.Stop()
		if err != nil {
			t.Fatalf("reboot %d: the stand-in primary: %v", round+1, err)
		}
		t.Logf("reboot %d: agent Ready %v after the node was back; last rewrite %v after it",
			round+1, ready.Round(time.Millisecond), race.Last().Sub(up).Round(time.Millisecond))
		rewrites += r
		m.waitBack(t, pods, rebooted, 3*time.Minute)
		// Once more while the node runs.
		if err := node.RewritePrimary(); err != nil {
			t.Fatal(err)
		}
		rewrites++
		pr.forget()
		m.waitCaptured(t, pr, pods, 2*time.Minute)
		t.Logf("reboot %d: %d rewrites of the primary; every pod still there captured again %v after the reboot began",
			round+1, r+1, time.Since(rebooted).Round(time.Millisecond))
		var left []*rebootPod
		for _, p := range pods {
			if !p.gone { // a pod that went is counted once, in the round it went
				left = append(left, p)
			}
		}
		m.countPods(t, left, &n, &d)
		for _, p := range left {
			p.gone = p.failed != "" || p.evicted
		}
		m.replaceGone(t, node.NodeName, left)
		m.nextRound(t, pods)
	}
	n.settle(d, pr, stop)
	t.Logf("figure: %s (%s): %d reboots, %d pod starts, %d uncaptured, %d failed, %d evicted, %d rewrites of the primary",
		scenario, m.CNI, reboots, n.Pods, n.Uncaptured, n.Failed, n.Evicted, rewrites)
	if m.RaceMeasured != "" {
		for _, f := range n.Failures {
			t.Logf("counted, not failed (%s): %s", m.RaceMeasured, f)
		}
	} else {
		judgeReboot(t, n)
	}
	if err := Record(n); err != nil {
		t.Errorf("record the racing reboot: %v", err)
	}
}

// nextRound readies the pods for another reboot: each one's current app
// container is the one the next reboot must replace. A pod that failed
// stays failed.
func (m *Mesh) nextRound(t *testing.T, pods []*rebootPod) {
	cs := m.Client(t)
	for _, p := range pods {
		if p.failed != "" {
			continue
		}
		got, err := cs.CoreV1().Pods(p.ns).Get(t.Context(), p.name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("pod %s/%s: %v", p.ns, p.name, err)
		}
		p.appID, p.back = AppID(got), 0
	}
}

// replaceGone creates each pod that went this round (deleted, evicted or
// failed, counted already) anew under the same name, as its controller
// would: a fleet's pods have owners, and a peer whose repair deletes pods
// (istio-cni's) would otherwise face the later reboots with fewer pods,
// or none. A failed pod still there is deleted first.
func (m *Mesh) replaceGone(t *testing.T, node string, pods []*rebootPod) {
	cs := m.Client(t)
	zero := int64(0)
	for _, p := range pods {
		if !p.gone {
			continue
		}
		err := cs.CoreV1().Pods(p.ns).Delete(t.Context(), p.name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatalf("delete failed pod %s/%s: %v", p.ns, p.name, err)
		}
		nodetest.Eventually(t, 2*time.Minute, "failed pod "+p.name+" gone", func() error {
			_, err := cs.CoreV1().Pods(p.ns).Get(t.Context(), p.name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return nil
			}
			return fmt.Errorf("%s/%s still there (%v)", p.ns, p.name, err)
		})
		got, err := cs.CoreV1().Pods(p.ns).Create(t.Context(), pinned(m.Pod(p.kind, p.name), node), metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("replace pod %s/%s: %v", p.ns, p.name, err)
		}
		p.uid, p.failed, p.evicted, p.gone, p.back = string(got.UID), "", false, false, 0
	}
	m.awaitRunning(t, pods, 3*time.Minute, "the replaced pods running")
}
