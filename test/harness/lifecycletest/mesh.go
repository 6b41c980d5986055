package lifecycletest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/sluicemesh/sluice/test/harness/nodetest"
)

// Pod kinds the scenarios mix.
const (
	KindSidecar = "sidecar" // the injector's metadata, a stand-in proxy as 1337
	KindAmbient = "ambient" // a plain pod in a namespace labelled ambient
	KindPlain   = "plain"   // no mesh metadata: must not be captured
)

// LabelDataplane marks an ambient namespace.
const LabelDataplane = "istio.io/dataplane-mode"

// Mesh is a mesh CNI as the scenarios drive it: how its pods look, how it
// is upgraded and rolled back, and where its agent is.
type Mesh struct {
	CNI     string // CNISluice or CNIIstioCNI: the results' row
	Cluster *nodetest.Cluster
	// Kinds are the pod kinds the churn mixes, in turn; the reboot runs
	// those that are not KindPlain.
	Kinds []string
	// Pod is a pod of kind named name, as the mesh's injector makes it.
	// Its app container is named "app" and runs the test app, which serves
	// "app" on 8080 and dials Unreachable from its first instant.
	Pod func(kind, name string) *corev1.Pod
	// Upgrade moves the CNI to its other image and Rollback back to the
	// first; each returns once every node runs the image Ready.
	Upgrade, Rollback func(t *testing.T)
	// Outage takes the agent of the node named node away as a failed
	// upgrade does and returns once none runs there; restore puts it back
	// and returns once every node runs it Ready (DaemonSetOutage).
	Outage func(t *testing.T, node string) (restore func(t *testing.T))
	// Agent is the container ID of the Ready agent on the node named
	// node, or why there is none.
	Agent func(t testing.TB, node string) (string, error)
	// FailedTolerated, when not empty, says why pods that failed for good
	// are counted but do not fail the test: the peer's measured
	// behaviour, not the rule sluice is held to.
	FailedTolerated string
	// RaceMeasured, when not empty, says why the racing-primary reboot's
	// counts are recorded and logged but do not fail the test: the peer
	// measured side by side, not held to sluice's rule.
	RaceMeasured string
}

// Client is the cluster's API client.
func (m *Mesh) Client(t testing.TB) *kubernetes.Clientset {
	t.Helper()
	cs, err := m.Cluster.Client()
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// kindNamespaces makes one namespace per kind, prefix-kind, the ambient
// one labelled ambient.
func (m *Mesh) kindNamespaces(t *testing.T, prefix string) map[string]string {
	out := map[string]string{}
	for _, k := range m.Kinds {
		var labels map[string]string
		if k == KindAmbient {
			labels = map[string]string{LabelDataplane: "ambient"}
		}
		out[k] = m.Cluster.Namespace(t, prefix+"-"+k, labels)
	}
	return out
}

// RolledOut is nil once each of the nodes runs exactly one pod of the
// DaemonSet, not terminating, of image and Ready: what Upgrade and
// Rollback wait for. The pods, not the DaemonSet's status: on the shared
// test machine the controller manager's status writes lagged minutes
// behind pods that were all Ready.
func RolledOut(cs kubernetes.Interface, ns, name, image string, nodes int) error {
	ds, err := cs.AppsV1().DaemonSets(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	sel := metav1.FormatLabelSelector(ds.Spec.Selector)
	l, err := cs.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return err
	}
	var bad []string
	on := map[string]bool{}
	for _, p := range l.Items {
		switch {
		case p.DeletionTimestamp != nil:
			bad = append(bad, p.Name+" on "+p.Spec.NodeName+" terminating")
		case p.Spec.Containers[0].Image != image:
			bad = append(bad, p.Name+" on "+p.Spec.NodeName+" runs "+p.Spec.Containers[0].Image)
		case !nodetest.PodReady(&p):
			bad = append(bad, p.Name+" on "+p.Spec.NodeName+" not Ready: "+nodetest.PodState(&p))
		default:
			on[p.Spec.NodeName] = true
		}
	}
	if len(bad) > 0 || len(on) != nodes {
		return fmt.Errorf("%d of %d nodes run a Ready %s; %s", len(on), nodes, image, strings.Join(bad, "; "))
	}
	return nil
}

// WaitRolledOut waits for RolledOut and fails t, with the tail of each
// pod's log that is not there yet, if it does not come in timeout.
func WaitRolledOut(t testing.TB, c *nodetest.Cluster, ns, name, image string, timeout time.Duration) {
	t.Helper()
	cs := c.ClientT(t)
	var err error
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if err = RolledOut(cs, ns, name, image, len(c.Nodes())); err == nil {
			return
		}
	}
	var logs strings.Builder
	l, _ := cs.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
	for _, p := range l.Items {
		if !nodetest.PodReady(&p) && len(p.Spec.Containers) > 0 {
			fmt.Fprintf(&logs, "\n%s on %s (%s):\n%s", p.Name, p.Spec.NodeName, nodetest.PodState(&p),
				tail(c.Logs(ns, p.Name, p.Spec.Containers[0].Name), 30))
		}
	}
	t.Fatalf("after %v waiting for %s to roll out %s: %v%s", timeout, name, image, err, logs.String())
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// AgentOn is the container ID of the one Ready, not terminating pod
// matching selector in ns on node, or why there is none: a Mesh's Agent.
func AgentOn(cs kubernetes.Interface, ns, selector, node string) (string, error) {
	l, err := cs.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: selector,
		FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		return "", err
	}
	var found []corev1.Pod
	for _, p := range l.Items {
		if p.DeletionTimestamp == nil {
			found = append(found, p)
		}
	}
	if len(found) != 1 {
		return "", fmt.Errorf("%d agent pods on %s", len(found), node)
	}
	p := &found[0]
	if !nodetest.PodReady(p) || len(p.Status.ContainerStatuses) == 0 {
		return "", fmt.Errorf("%s not Ready: %s", p.Name, nodetest.PodState(p))
	}
	return p.Status.ContainerStatuses[0].ContainerID, nil
}
