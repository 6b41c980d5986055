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
	never := 0
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
		switch {
		case p.start != 0:
			starts = append(starts, p.start)
		case p.failed != "" || p.evicted:
			never++
		}
	}
	if d := c.phases[phase]; d > 0 {
		n.PodsPerNodeSecond = float64(n.Pods) / float64(n.Nodes) / d.Seconds()
	}
	p50, p99 := StartPercentiles(starts, never)
	n.StartP50NS, n.StartP99NS = int64(p50), int64(p99)
	if base.Pods > 0 {
		n.ExtraP50NS = int64(Extra(p50, Duration(base.StartP50NS)))
		n.ExtraP99NS = int64(Extra(p99, Duration(base.StartP99NS)))
	}
	return n
}

// DelayText is a row's delay for a log line: "never" for Never.
func DelayText(ns int64) string {
	if Duration(ns) == Never {
		return "never"
	}
	return Duration(ns).Round(time.Millisecond).String()
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
	t.Logf("%-8s %s: pods=%d (%.2f/s per node on %d nodes) start p50=%s p99=%s extra p50=%s p99=%s", n.Scenario, n.CNI,
		n.Pods, n.PodsPerNodeSecond, n.Nodes, DelayText(n.StartP50NS), DelayText(n.StartP99NS),
		DelayText(n.ExtraP50NS), DelayText(n.ExtraP99NS))
}
