package node

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicemesh/sluice/test/harness/nodetest"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// helm upgrade rolls the agent on both nodes while two pods a second are
// created on the node under test, sidecar and plain in turn, and then helm
// rollback rolls it back the same way: in each half every pod starts (none
// fails for good, no container restarts), and every sidecar pod's app finds
// its first connection captured (answered by the proxy, or refused while
// the proxy is not listening yet; uncaptured, TEST-NET is unreachable), so
// no pod ran uncaptured at any point of either roll. With the entry removed
// on the old agent's exit (--uninstall-on-exit=true) and five pods a second
// it failed: a pod started in the gap. Each half's start times are logged.
func TestHelmUpgradeUnderChurn(t *testing.T) {
	requireAgent(t)
	underChurn(t, "upgrade", func() {
		helm(t, append([]string{"upgrade", release, "deploy/helm/sluice", "-n", releaseNS},
			chartValues("podAnnotations.churn=roll-"+fmt.Sprint(time.Now().UnixNano()))...)...)
	})
	// Back to the revision before the upgrade: its template lacks the
	// annotation, so the DaemonSet rolls again.
	underChurn(t, "rollback", func() { helm(t, "rollback", release, "-n", releaseNS) })
}

// underChurn runs roll (a helm command that changes the agent's template)
// while pods are created in a namespace of the half's own, waits for the
// roll to finish on every node, checks every pod created during it and
// logs their create → running p50 and p99. The pods are deleted after, so
// the next half's are the node's only churn.
func underChurn(t *testing.T, half string, roll func()) {
	t.Helper()
	ns := namespace(t, nil)
	churn := startChurn(t, ns)
	roll()
	nodetest.Eventually(t, 3*time.Minute, half+": the agent rolled out on every node", func() error { return rolledOut(t) })
	// A roll can be quicker than ten pods: the churn goes on a little
	// after it, which is the new agents' first seconds.
	nodetest.Eventually(t, time.Minute, half+": ten pods created", func() error {
		if n := churn.count(); n < 10 {
			return fmt.Errorf("%d pods", n)
		}
		return nil
	})
	pods := churn.stop()
	var starts []time.Duration
	for _, p := range pods {
		got := cluster.RunningPod(t, ns, p.Name, 2*time.Minute)
		starts = append(starts, startDelay(got))
		for _, cs := range append(got.Status.InitContainerStatuses, got.Status.ContainerStatuses...) {
			if cs.RestartCount > 0 {
				t.Errorf("%s: pod %s: container %s restarted %d times", half, p.Name, cs.Name, cs.RestartCount)
			}
		}
		if p.Annotations[annStatus] == "" {
			continue
		}
		first := firstDial(t, ns, p.Name)
		if !strings.Contains(first, "proxy captured") && !strings.Contains(first, "refused") {
			t.Errorf("%s: pod %s started uncaptured: its first dial %q", half, p.Name, first)
		}
	}
	slices.Sort(starts)
	t.Logf("%s: %d pods created during and just after the roll; create → running p50 %v, p99 %v", half, len(starts),
		starts[len(starts)/2], starts[len(starts)*99/100])
	deletePods(t, ns)
}

// deletePods deletes every pod of ns at once and waits until they are
// gone.
func deletePods(t *testing.T, ns string) {
	t.Helper()
	zero := int64(0)
	pods := client(t).CoreV1().Pods(ns)
	if err := pods.DeleteCollection(t.Context(), metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{}); err != nil {
		t.Fatalf("delete the pods of %s: %v", ns, err)
	}
	nodetest.Eventually(t, 2*time.Minute, "the pods of "+ns+" gone", func() error {
		l, err := pods.List(t.Context(), metav1.ListOptions{})
		if err != nil {
			return err
		}
		if len(l.Items) > 0 {
			return fmt.Errorf("%d pods left", len(l.Items))
		}
		return nil
	})
}

type churn struct {
	done chan struct{}
	wg   sync.WaitGroup
	mu   sync.Mutex
	pods []*corev1.Pod
}

// startChurn creates two pods a second in ns until stop: a pod that lands
// in a gap of the roll is caught only if one is created then.
func startChurn(t *testing.T, ns string) *churn {
	c := &churn{done: make(chan struct{})}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			p := plainPod(fmt.Sprintf("churn-%d", i), unreachable)
			if i%2 == 0 {
				p = sidecarPod(p.Name, unreachable, nil)
			}
			if p.Spec.NodeSelector == nil {
				p.Spec.NodeSelector = map[string]string{corev1.LabelHostname: cluster.NodeName}
			}
			if got, err := client(t).CoreV1().Pods(ns).Create(t.Context(), p, metav1.CreateOptions{}); err == nil {
				c.mu.Lock()
				c.pods = append(c.pods, got)
				c.mu.Unlock()
			}
			select {
			case <-c.done:
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(func() { c.stop() })
	return c
}

func (c *churn) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.pods)
}

func (c *churn) stop() []*corev1.Pod {
	select {
	case <-c.done:
	default:
		close(c.done)
	}
	c.wg.Wait()
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.pods)
}

// rolledOut is nil once every node runs a Ready agent of the DaemonSet's
// current template.
func rolledOut(t *testing.T) error {
	ds, err := client(t).AppsV1().DaemonSets(releaseNS).Get(t.Context(), release+"-agent", metav1.GetOptions{})
	if err != nil {
		return err
	}
	return daemonSetDone(ds)
}

func daemonSetDone(ds *appsv1.DaemonSet) error {
	s := ds.Status
	if s.ObservedGeneration < ds.Generation || s.UpdatedNumberScheduled != s.DesiredNumberScheduled ||
		s.NumberAvailable != s.DesiredNumberScheduled || s.NumberUnavailable != 0 {
		return fmt.Errorf("daemonset status %+v", s)
	}
	return nil
}

// startDelay is from the pod's creation to its last container's start.
func startDelay(p *corev1.Pod) time.Duration {
	var last time.Time
	for _, cs := range p.Status.ContainerStatuses {
		if r := cs.State.Running; r != nil && r.StartedAt.After(last) {
			last = r.StartedAt.Time
		}
	}
	return last.Sub(p.CreationTimestamp.Time)
}

// firstDial is the app container's first dial line.
func firstDial(t *testing.T, ns, pod string) string {
	var line string
	nodetest.Eventually(t, 30*time.Second, pod+"'s first dial", func() error {
		for _, l := range strings.Split(logs(t, ns, pod, "app"), "\n") {
			if strings.HasPrefix(l, "app dial ") {
				line = l
				return nil
			}
		}
		return fmt.Errorf("no dial logged yet")
	})
	return line
}
