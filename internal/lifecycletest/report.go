package lifecycletest

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// count is the Count of the churn's pods created in phase; base, the
// baseline's, gives the extra start delay.
func (c *churner) count(phase string, base Count) Count {
	n := Count{CNI: c.m.CNI, Scenario: phase, Nodes: len(c.m.Cluster.Nodes()), Kinds: slices.Clone(c.m.Kinds)}
	var starts []time.Duration
	for _, p := range c.pods {
		if p.phase != phase {
			continue
		}
		n.Pods++
		switch {
		case p.evicted:
			n.Evicted++
			n.Failures = append(n.Failures, p.story("evicted: "+p.failed))
		case p.failed != "":
			n.Failed++
			n.Failures = append(n.Failures, p.story("failed for good: "+p.failed))
		case p.kind != KindPlain && !DialCaptured(p.first):
			n.Uncaptured++
			n.Failures = append(n.Failures, p.story(fmt.Sprintf("ran uncaptured: its app's first dial got %q", p.first)))
		case p.kind == KindPlain && DialCaptured(p.first):
			n.Overcaptured++
			n.Failures = append(n.Failures, p.story(fmt.Sprintf("captured with no mesh metadata: its app's first dial got %q", p.first)))
		}
		if p.start != 0 {
			starts = append(starts, p.start)
		}
	}
	if d := c.phases[phase]; d > 0 {
		n.PodsPerNodeSecond = float64(n.Pods) / float64(n.Nodes) / d.Seconds()
	}
	n.StartP50NS, n.StartP99NS = int64(Percentile(starts, 50)), int64(Percentile(starts, 99))
	if base.Pods > 0 {
		n.ExtraP50NS, n.ExtraP99NS = n.StartP50NS-base.StartP50NS, n.StartP99NS-base.StartP99NS
	}
	return n
}

func (p *churnPod) story(what string) string {
	return fmt.Sprintf("%s pod %s/%s on %s (%s) %s", p.kind, p.ns, p.name, p.node, p.phase, what)
}

// judge fails t on each of n's counted pods (failed ones only logged when
// the Mesh tolerates them) and logs its numbers.
func (c *churner) judge(t *testing.T, n Count) {
	t.Helper()
	for _, f := range n.Failures {
		t.Log(f)
	}
	if n.Pods == 0 {
		t.Errorf("%s: no pod created in the phase", n.Scenario)
	}
	bad := n.Uncaptured + n.Overcaptured + n.Evicted
	if c.m.FailedTolerated == "" {
		bad += n.Failed
	}
	if bad > 0 {
		t.Errorf("%s on %s: %d uncaptured, %d captured with no mesh metadata, %d evicted, %d failed for good (of %d pods)",
			n.Scenario, n.CNI, n.Uncaptured, n.Overcaptured, n.Evicted, n.Failed, n.Pods)
	}
	if n.Failed > 0 && c.m.FailedTolerated != "" {
		t.Logf("%s on %s: %d pods failed for good, counted, not failing the test: %s", n.Scenario, n.CNI, n.Failed, c.m.FailedTolerated)
	}
	t.Logf("%-8s %s: pods=%d (%.2f/s per node on %d nodes) start p50=%v p99=%v extra p50=%v p99=%v", n.Scenario, n.CNI,
		n.Pods, n.PodsPerNodeSecond, n.Nodes, Duration(n.StartP50NS).Round(time.Millisecond),
		Duration(n.StartP99NS).Round(time.Millisecond), Duration(n.ExtraP50NS).Round(time.Millisecond),
		Duration(n.ExtraP99NS).Round(time.Millisecond))
}
