package lifecycletest

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluicemesh/sluice/test/harness/nodetest"
)

// ChurnIntervalEnv names the pace of pod creation across the cluster, a
// Go duration. make bench runs FullChurnInterval: 2 pods/s, kinds in turn,
// nodes in turn, so each of two nodes gets one a second. make test runs the
// smaller version, DefaultChurnInterval, which keeps its cluster suites
// inside CI's budget. The full pace needs the 2-core machine to itself:
// alone, sluice's upgrade and rollback under it take under a minute
// (baseline start p50 1.9 s); beside other work on both cores a rollout
// passed ten minutes, whichever CNI rolled.
const (
	ChurnIntervalEnv     = "SLUICE_CHURN_INTERVAL"
	FullChurnInterval    = 500 * time.Millisecond
	DefaultChurnInterval = time.Second
)

// churnInterval is the pace in force: the env var's, else the default.
func churnInterval(t *testing.T) time.Duration {
	v := os.Getenv(ChurnIntervalEnv)
	if v == "" {
		return DefaultChurnInterval
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		t.Fatalf("$%s=%q: not a positive duration", ChurnIntervalEnv, v)
	}
	return d
}

// startTimeout is how long a pod may take to run every container before
// it has failed for good.
const startTimeout = 90 * time.Second

// churnPod is one pod's story: when it was created, how long until every
// container ran, its app's first dial, or why it never got there.
type churnPod struct {
	ns, name, kind, phase, node string
	start                       time.Duration
	first                       string
	failed                      string
	evicted                     bool
	// settled is set once the pod has started or failed.
	settled atomic.Bool
}

// churner creates pods of every kind of its Mesh at churnInterval on
// every node in turn until stopped, follows each until its app has
// dialled once, then deletes it.
type churner struct {
	m      *Mesh
	t      *testing.T
	ns     map[string]string // kind -> namespace
	mu     sync.Mutex
	phase  string
	phases map[string]time.Duration // how long each phase lasted
	since  time.Time                // the current phase's start
	pods   []*churnPod
	wg     sync.WaitGroup
	// tolerate, when set, is how long the pods tolerate a not-ready node.
	tolerate time.Duration
}

// newChurner makes the churner of a scenario, its namespaces named
// prefix-kind (each scenario its own: a namespace is gone only a while
// after its test deleted it).
func newChurner(t *testing.T, m *Mesh, prefix string) *churner {
	return &churner{m: m, t: t, ns: m.kindNamespaces(t, prefix), phase: ScenarioBaseline,
		phases: map[string]time.Duration{}, since: time.Now()}
}

// setPhase ends the current phase and starts p.
func (c *churner) setPhase(p string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.phases[c.phase] += time.Since(c.since)
	c.phase, c.since = p, time.Now()
}

// run creates pods until ctx is done, then waits for every one followed.
func (c *churner) run(ctx context.Context) {
	every := churnInterval(c.t)
	c.t.Logf("churn: a pod every %v across %d nodes ($%s)", every, len(c.m.Cluster.Nodes()), ChurnIntervalEnv)
	tick := time.NewTicker(every)
	defer tick.Stop()
	nodes := c.m.Cluster.Nodes()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			c.setPhase("")
			c.wg.Wait()
			return
		case <-tick.C:
		}
		c.mu.Lock()
		p := &churnPod{kind: c.m.Kinds[i%len(c.m.Kinds)], phase: c.phase, node: nodes[i%len(nodes)].NodeName}
		p.ns, p.name = c.ns[p.kind], fmt.Sprintf("%s-%d", p.kind, i)
		c.pods = append(c.pods, p)
		c.mu.Unlock()
		c.wg.Add(1)
		go func() { defer c.wg.Done(); c.follow(p) }()
	}
}

// follow creates the pod, times it to all containers running, reads its
// app's first dial and deletes it.
func (c *churner) follow(p *churnPod) {
	defer p.settled.Store(true)
	ctx := context.Background()
	pods := c.m.Client(c.t).CoreV1().Pods(p.ns)
	created := time.Now()
	pod := pinned(c.m.Pod(p.kind, p.name), p.node)
	if c.tolerate > 0 {
		pod = tolerateNotReady(pod, c.tolerate)
	}
	if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		p.failed = "create: " + err.Error()
		return
	}
	defer func() { _ = pods.Delete(ctx, p.name, metav1.DeleteOptions{}) }()
	state := ""
	for deadline := created.Add(startTimeout); ; time.Sleep(200 * time.Millisecond) {
		got, err := pods.Get(ctx, p.name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			p.failed = "deleted under the test, last " + state
			return
		case err == nil && Evicted(got):
			p.evicted, p.failed = true, "evicted: "+got.Status.Message
			return
		case err == nil && AllRunning(got):
			p.start = time.Since(created)
		case err == nil:
			state = nodetest.PodState(got)
		}
		if p.start != 0 {
			break
		}
		if time.Now().After(deadline) {
			p.failed = fmt.Sprintf("not running after %v: %s", startTimeout, state)
			return
		}
	}
	p.settled.Store(true)
	for deadline := time.Now().Add(30 * time.Second); p.first == ""; time.Sleep(200 * time.Millisecond) {
		p.first = FirstDial(c.m.Cluster.Logs(p.ns, p.name, "app"))
		if p.first == "" && time.Now().After(deadline) {
			p.failed = "app logged no dial in 30s"
			return
		}
	}
}

// settle waits, up to a minute, until every pod created in phase has
// started or failed: the next phase's disruption must not land on the
// pods counted as undisturbed (a baseline pod created in its last second
// would otherwise wait out the outage or the roll that follows it).
func (c *churner) settle(phase string) {
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		c.mu.Lock()
		pending := 0
		for _, p := range c.pods {
			if p.phase == phase && !p.settled.Load() {
				pending++
			}
		}
		c.mu.Unlock()
		if pending == 0 {
			return
		}
	}
	c.t.Logf("churn: %s pods still starting a minute after the phase ended", phase)
}

// RollingUpgrade runs scenario 4: while pods of every kind start and
// stop on every node, 15 s of churn with no rollout (the baseline), then,
// once the baseline's pods have started, Upgrade, then Rollback, each followed by 3 s of churn (pods created
// just after a roll count as its). It fails t on any pod that ran
// uncaptured, was captured with no mesh metadata, was evicted or failed
// for good (unless the Mesh tolerates failures), and records a baseline, an
// upgrade and a rollback Count.
func RollingUpgrade(t *testing.T, m *Mesh) {
	c := newChurner(t, m, "churn")
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); c.run(ctx) }()
	defer func() { stop(); <-done }()

	time.Sleep(15 * time.Second)
	c.setPhase(ScenarioUpgrade)
	c.settle(ScenarioBaseline)
	m.Upgrade(t)
	time.Sleep(3 * time.Second)
	c.setPhase(ScenarioRollback)
	m.Rollback(t)
	time.Sleep(3 * time.Second)
	stop()
	<-done
	base := c.count(ScenarioBaseline, Count{})
	for _, ph := range []string{ScenarioBaseline, ScenarioUpgrade, ScenarioRollback} {
		n := c.count(ph, base)
		c.judge(t, n)
		if err := Record(n); err != nil {
			t.Errorf("record %s: %v", ph, err)
		}
	}
}
