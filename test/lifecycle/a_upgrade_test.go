package lifecycle

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicemesh/sluice/internal/nodetest"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// churnInterval paces pod creation: 1.25 pods/s, kinds in turn.
const churnInterval = 800 * time.Millisecond

// churnPod is one pod's story: when it was created, how long until every
// container ran, its app's first dial, or why it never got there.
type churnPod struct {
	ns, name, kind, phase string
	start                 time.Duration
	first                 string
	failed                string
}

// churner creates pods of every kind at churnInterval until stopped,
// follows each until its app has dialled once, then deletes it.
type churner struct {
	t     *testing.T
	ns    map[string]string // kind -> namespace
	phase string
	mu    sync.Mutex
	pods  []*churnPod
	wg    sync.WaitGroup
}

func (c *churner) setPhase(p string) {
	c.mu.Lock()
	c.phase = p
	c.mu.Unlock()
}

// run creates pods until ctx is done, then waits for every one followed.
func (c *churner) run(ctx context.Context) {
	kinds := []string{kindSidecar, kindAmbient, kindPlain}
	tick := time.NewTicker(churnInterval)
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			c.wg.Wait()
			return
		case <-tick.C:
		}
		c.mu.Lock()
		p := &churnPod{kind: kinds[i%len(kinds)], phase: c.phase}
		p.ns, p.name = c.ns[p.kind], fmt.Sprintf("%s-%d", p.kind, i)
		c.pods = append(c.pods, p)
		c.mu.Unlock()
		c.wg.Add(1)
		go func() { defer c.wg.Done(); c.follow(p) }()
	}
}

// follow creates the pod, times it to all containers running, reads its
// app's first dial and deletes it. A pod that does not run within
// 90 s has failed for good.
func (c *churner) follow(p *churnPod) {
	cs := client(c.t)
	ctx := context.Background()
	pods := cs.CoreV1().Pods(p.ns)
	created := time.Now()
	if _, err := pods.Create(ctx, podOfKind(p.kind, p.name), metav1.CreateOptions{}); err != nil {
		p.failed = "create: " + err.Error()
		return
	}
	defer func() { _ = pods.Delete(ctx, p.name, metav1.DeleteOptions{}) }()
	state := ""
	for deadline := created.Add(90 * time.Second); p.start == 0; time.Sleep(100 * time.Millisecond) {
		got, err := pods.Get(ctx, p.name, metav1.GetOptions{})
		if err == nil && allRunning(got) {
			p.start = time.Since(created)
			break
		}
		if err == nil {
			state = nodetest.PodState(got)
		}
		if time.Now().After(deadline) {
			p.failed = "not running after 90s: " + state
			return
		}
	}
	for deadline := time.Now().Add(30 * time.Second); p.first == ""; time.Sleep(200 * time.Millisecond) {
		p.first = firstDial(logs(c.t, p.ns, p.name, "app"))
		if p.first == "" && time.Now().After(deadline) {
			p.failed = "app logged no dial in 30s"
			return
		}
	}
}

// While pods of every kind start and stop at over one a second, `helm
// upgrade` rolls the agent to another build and `helm rollback` rolls it
// back. No mesh pod's app makes its first connection uncaptured (the
// pod's rules were in before the app ran), no plain pod's is captured, no
// pod fails for good, and the extra start delay over the same churn with
// no rollout is logged.
func TestRollingUpgradeUnderChurn(t *testing.T) {
	requireMesh(t)
	c := &churner{t: t, phase: "baseline", ns: map[string]string{
		kindSidecar: namespace(t, "churn", nil),
		kindPlain:   "churn",
		kindAmbient: namespace(t, "churn-ambient", map[string]string{labelDataplane: "ambient"}),
	}}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); c.run(ctx) }()
	defer func() { stop(); <-done }()

	time.Sleep(15 * time.Second) // the baseline: elapsed churn is what is measured
	c.setPhase("upgrade")
	helm(t, chartArgs("upgrade", tagB)...)
	readyAgent(t, tagB, 2*time.Minute)
	time.Sleep(3 * time.Second) // pods created just after the roll count as its
	c.setPhase("rollback")
	helm(t, "rollback", release, "-n", releaseNS)
	readyAgent(t, tagA, 2*time.Minute)
	time.Sleep(3 * time.Second)
	stop()
	<-done
	c.report(t)
}

// report fails t for each uncaptured, overcaptured or failed pod and logs
// the start delays per phase.
func (c *churner) report(t *testing.T) {
	byPhase := map[string][]time.Duration{}
	for _, p := range c.pods {
		switch {
		case p.failed != "":
			t.Errorf("%s pod %s/%s (%s) failed for good: %s", p.kind, p.ns, p.name, p.phase, p.failed)
			continue
		case p.kind != kindPlain && !dialCaptured(p.first):
			t.Errorf("%s pod %s/%s (%s) ran uncaptured: its app's first dial got %q", p.kind, p.ns, p.name, p.phase, p.first)
		case p.kind == kindPlain && dialCaptured(p.first):
			t.Errorf("plain pod %s/%s (%s) was captured: its app's first dial got %q", p.ns, p.name, p.phase, p.first)
		}
		byPhase[p.phase] = append(byPhase[p.phase], p.start)
	}
	base := byPhase["baseline"]
	for _, ph := range []string{"baseline", "upgrade", "rollback"} {
		ds := byPhase[ph]
		if len(ds) == 0 {
			t.Errorf("no pod started in phase %s", ph)
			continue
		}
		t.Logf("%-8s pods=%d start p50=%v p99=%v extra p50=%v p99=%v", ph, len(ds),
			percentile(ds, 50).Round(time.Millisecond), percentile(ds, 99).Round(time.Millisecond),
			(percentile(ds, 50) - percentile(base, 50)).Round(time.Millisecond),
			(percentile(ds, 99) - percentile(base, 99)).Round(time.Millisecond))
	}
	kinds := map[string]int{}
	for _, p := range c.pods {
		kinds[p.kind]++
	}
	t.Logf("pods created: %d (%s)", len(c.pods), strings.TrimPrefix(fmt.Sprint(kinds), "map"))
}
