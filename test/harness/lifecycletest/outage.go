package lifecycletest

import (
	"context"
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/sluicemesh/sluice/test/harness/nodetest"
)

// OutageHold is how long Outage keeps a node's agent away. It is longer
// than a failing CNI STATUS takes to show and the node lifecycle
// controller to act on it (measured with containerd 2.x and a 1.1.0
// conflist: NotReady ~4 s after the agent went, not-ready:NoExecute at
// ~8 s), plus the churn pods' NotReadyToleration, so a node the outage
// made NotReady has its pods evicted within the hold. It is short enough
// that a pod created as the agent went still starts within startTimeout
// of its creation, if the agent's return lets it.
const OutageHold = 20 * time.Second

// NotReadyToleration is how long the churn pods of Outage tolerate their
// node being not ready or unreachable, instead of the default 300 s: a
// node the outage took down would see them evicted within OutageHold.
const NotReadyToleration = 5 * time.Second

// Outage runs scenario 3 under churn: while pods of every kind start and
// stop on every node, 15 s of churn with no outage (the baseline), then,
// once the baseline's pods have started, the first node's agent is taken away for OutageHold (Mesh.Outage) and
// put back, followed by 3 s of churn. The churn pods tolerate a not-ready
// node for NotReadyToleration only. It fails t on any pod that ran
// uncaptured, was captured with no mesh metadata, was evicted or failed
// for good (unless the Mesh tolerates failures), and if the node stopped
// being Ready or was tainted during the outage; it records an outage
// Count, whose extra start delay is over its own baseline.
func Outage(t *testing.T, m *Mesh) {
	c := newChurner(t, m, "outage")
	c.tolerate = NotReadyToleration
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); c.run(ctx) }()
	defer func() { stop(); <-done }()

	time.Sleep(15 * time.Second)
	node := m.Cluster.Nodes()[0].NodeName
	c.setPhase(ScenarioOutage)
	c.settle(ScenarioBaseline)
	restore := m.Outage(t, node)
	watch := nodetest.WatchNode(t, m.Client(t), node)
	time.Sleep(OutageHold)
	watch.Stop()
	restore(t)
	t.Logf("%s's agent away for %v, back %v after it went", node, OutageHold, watch.Elapsed().Round(time.Millisecond))
	if err := watch.Err(); err != nil {
		t.Errorf("the agent outage took the node out of service: %v", err)
	}
	time.Sleep(3 * time.Second)
	stop()
	<-done
	base := c.count(ScenarioBaseline, Count{})
	n := c.count(ScenarioOutage, base)
	c.judge(t, n)
	if err := Record(n); err != nil {
		t.Errorf("record %s: %v", ScenarioOutage, err)
	}
}

// tolerateNotReady gives p d of toleration for its node being not ready
// or unreachable.
func tolerateNotReady(p *corev1.Pod, d time.Duration) *corev1.Pod {
	secs := int64(d / time.Second)
	for _, key := range []string{corev1.TaintNodeNotReady, corev1.TaintNodeUnreachable} {
		p.Spec.Tolerations = append(p.Spec.Tolerations, corev1.Toleration{Key: key, Operator: corev1.TolerationOpExists,
			Effect: corev1.TaintEffectNoExecute, TolerationSeconds: &secs})
	}
	return p
}

// DaemonSetOutage takes the pod of the DaemonSet ns/name on node away as a
// failed upgrade does, a Mesh's Outage: the template's container image
// replaced by absent (on no node; the pods pull Never) under the OnDelete
// strategy, and the pod on node deleted, so node alone loses its agent
// and the other nodes keep theirs. It returns once no container of the
// DaemonSet runs on node. restore puts the template's image and the
// update strategy back, deletes the broken pod and waits until every node
// runs the first image Ready.
func DaemonSetOutage(t *testing.T, c *nodetest.Cluster, ns, name, container, absent, node string) (restore func(t *testing.T)) {
	t.Helper()
	cs := c.ClientT(t)
	var image string
	var strategy appsv1.DaemonSetUpdateStrategy
	updateDaemonSet(t, cs, ns, name, func(ds *appsv1.DaemonSet) {
		strategy = ds.Spec.UpdateStrategy
		ds.Spec.UpdateStrategy = appsv1.DaemonSetUpdateStrategy{Type: appsv1.OnDeleteDaemonSetStrategyType}
		image = setImage(t, ds, container, absent)
	})
	deleteDaemonPods(t, cs, ns, name, node)
	nodetest.Eventually(t, time.Minute, "no "+name+" container running on "+node, func() error {
		return noneRunning(cs, ns, name, node)
	})
	done := false
	restore = func(t *testing.T) {
		if done {
			return
		}
		done = true
		updateDaemonSet(t, cs, ns, name, func(ds *appsv1.DaemonSet) {
			ds.Spec.UpdateStrategy = strategy
			setImage(t, ds, container, image)
		})
		deleteDaemonPods(t, cs, ns, name, node)
		WaitRolledOut(t, c, ns, name, image, 5*time.Minute)
	}
	t.Cleanup(func() { restore(t) })
	return restore
}

// updateDaemonSet applies change to the DaemonSet, again on a conflict.
func updateDaemonSet(t *testing.T, cs kubernetes.Interface, ns, name string, change func(*appsv1.DaemonSet)) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		ds, err := cs.AppsV1().DaemonSets(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		change(ds)
		_, err = cs.AppsV1().DaemonSets(ns).Update(context.Background(), ds, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("update DaemonSet %s/%s: %v", ns, name, err)
	}
}

// setImage sets the image of the template's container named container,
// returning the one it had.
func setImage(t *testing.T, ds *appsv1.DaemonSet, container, image string) string {
	for i := range ds.Spec.Template.Spec.Containers {
		if c := &ds.Spec.Template.Spec.Containers[i]; c.Name == container {
			old := c.Image
			c.Image = image
			return old
		}
	}
	t.Fatalf("DaemonSet %s has no container %s", ds.Name, container)
	return ""
}

// daemonPods lists the DaemonSet's pods on node.
func daemonPods(cs kubernetes.Interface, ns, name, node string) ([]corev1.Pod, error) {
	ds, err := cs.AppsV1().DaemonSets(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	l, err := cs.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{
		LabelSelector: metav1.FormatLabelSelector(ds.Spec.Selector), FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		return nil, err
	}
	return l.Items, nil
}

func deleteDaemonPods(t *testing.T, cs kubernetes.Interface, ns, name, node string) {
	t.Helper()
	pods, err := daemonPods(cs, ns, name, node)
	if err != nil {
		t.Fatalf("list %s pods on %s: %v", name, node, err)
	}
	for _, p := range pods {
		if err := cs.CoreV1().Pods(ns).Delete(context.Background(), p.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatalf("delete %s: %v", p.Name, err)
		}
	}
}

// noneRunning is nil when no container of the DaemonSet runs on node.
func noneRunning(cs kubernetes.Interface, ns, name, node string) error {
	pods, err := daemonPods(cs, ns, name, node)
	if err != nil {
		return err
	}
	for _, p := range pods {
		for _, st := range p.Status.ContainerStatuses {
			if st.State.Running != nil {
				return fmt.Errorf("%s runs %s", p.Name, st.Name)
			}
		}
	}
	return nil
}
