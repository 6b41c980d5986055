package nodetest

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// The API helpers every suite on the test cluster (test/node, test/peer,
// test/lifecycle, test/mesh) wrote its own copy of.

// ClientT is Client failing t.
func (c *Cluster) ClientT(t testing.TB) *kubernetes.Clientset {
	t.Helper()
	cs, err := c.Client()
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// Logs is a container's log as `kubectl logs` reads it (the API server,
// the kubelet, containerd's log file), or why not, in parentheses. Not a
// test's context: failure reports and cleanups read logs too.
func (c *Cluster) Logs(ns, pod, container string) string {
	cs, err := c.Client()
	if err != nil {
		return "(logs: " + err.Error() + ")"
	}
	b, err := cs.CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{Container: container}).DoRaw(context.Background())
	if err != nil {
		return "(logs: " + err.Error() + ")"
	}
	return string(b)
}

// nsSeq numbers TestNamespace's names.
var nsSeq atomic.Int64

// TestNamespace creates a namespace of t's own, named for t (lower case,
// at most 50 characters, a number after), with labels; see Namespace.
func (c *Cluster) TestNamespace(t testing.TB, labels map[string]string) string {
	t.Helper()
	name := strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
	if len(name) > 50 {
		name = name[:50]
	}
	return c.Namespace(t, strings.Trim(name, "-")+"-"+strconv.FormatInt(nsSeq.Add(1), 10), labels)
}

// Namespace creates namespace name with labels, deletes it when t ends,
// and waits for its default ServiceAccount, which pods need and the
// controller manager creates a moment later.
func (c *Cluster) Namespace(t testing.TB, name string, labels map[string]string) string {
	t.Helper()
	cs := c.ClientT(t)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	if _, err := cs.CoreV1().Namespaces().Create(t.Context(), ns, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace %s: %v", name, err)
	}
	t.Cleanup(func() {
		_ = cs.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	Eventually(t, 30*time.Second, "default ServiceAccount in "+name, func() error {
		_, err := cs.CoreV1().ServiceAccounts(name).Get(t.Context(), "default", metav1.GetOptions{})
		return err
	})
	return name
}

// PodsOn are the pods in ns matching selector on the node (any node of
// the cluster: each has its own NodeName). Not t's context: cleanups that
// restore an agent list them too.
func (c *Cluster) PodsOn(t testing.TB, ns, selector string) []corev1.Pod {
	t.Helper()
	l, err := c.ClientT(t).CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: selector,
		FieldSelector: "spec.nodeName=" + c.NodeName})
	if err != nil {
		t.Fatalf("list pods %s in %s on %s: %v", selector, ns, c.NodeName, err)
	}
	return l.Items
}

// ReadyPodOn waits for exactly one pod in ns matching selector on the
// node, not being deleted and Ready, as a DaemonSet's agent is, and
// returns it.
func (c *Cluster) ReadyPodOn(t testing.TB, ns, selector string, timeout time.Duration) corev1.Pod {
	t.Helper()
	var ready corev1.Pod
	Eventually(t, timeout, "one Ready pod "+selector+" on "+c.NodeName, func() error {
		var found []corev1.Pod
		for _, p := range c.PodsOn(t, ns, selector) {
			if p.DeletionTimestamp == nil {
				found = append(found, p)
			}
		}
		if len(found) != 1 {
			return fmt.Errorf("%d pods %s on %s", len(found), selector, c.NodeName)
		}
		if !PodReady(&found[0]) {
			return fmt.Errorf("%s not Ready: %s", found[0].Name, PodState(&found[0]))
		}
		ready = found[0]
		return nil
	})
	return ready
}

// CreatePod creates p on the node (NodeName) unless p names its own: the
// suites read the node's files, netns and agent, and the other node is
// there for the cluster's sake (the node lifecycle controller evicts only
// while another node is Ready).
func (c *Cluster) CreatePod(t testing.TB, ns string, p *corev1.Pod) *corev1.Pod {
	t.Helper()
	if p.Spec.NodeSelector == nil {
		p.Spec.NodeSelector = map[string]string{corev1.LabelHostname: c.NodeName}
	}
	got, err := c.ClientT(t).CoreV1().Pods(ns).Create(t.Context(), p, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pod %s/%s: %v", ns, p.Name, err)
	}
	return got
}

// GetPod reads a pod, failing t.
func (c *Cluster) GetPod(t testing.TB, ns, name string) *corev1.Pod {
	t.Helper()
	p, err := c.ClientT(t).CoreV1().Pods(ns).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get pod %s/%s: %v", ns, name, err)
	}
	return p
}

// DeletePod deletes a pod at once, for cleanups: errors pass.
func (c *Cluster) DeletePod(ns, name string) {
	cs, err := c.Client()
	if err != nil {
		return
	}
	zero := int64(0)
	_ = cs.CoreV1().Pods(ns).Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
}

// RunningPod waits until the pod has an IP and every container runs, and
// returns it.
func (c *Cluster) RunningPod(t testing.TB, ns, name string, timeout time.Duration) *corev1.Pod {
	t.Helper()
	var p *corev1.Pod
	Eventually(t, timeout, "pod "+ns+"/"+name+" Running", func() error {
		p = c.GetPod(t, ns, name)
		if p.Status.PodIP == "" {
			return fmt.Errorf("%s, no pod IP", PodState(p))
		}
		return IsRunning(p)
	})
	return p
}

// IsRunning is nil once every container of the pod runs.
func IsRunning(p *corev1.Pod) error {
	if p.Status.Phase != corev1.PodRunning {
		return fmt.Errorf("%s", PodState(p))
	}
	for _, cs := range p.Status.ContainerStatuses {
		if cs.State.Running == nil {
			return fmt.Errorf("%s", PodState(p))
		}
	}
	return nil
}

// LogShows waits until the container's log has a line holding every one
// of parts.
func (c *Cluster) LogShows(t testing.TB, ns, pod, container string, timeout time.Duration, parts ...string) {
	t.Helper()
	Eventually(t, timeout, fmt.Sprintf("%s/%s[%s] to log %q", ns, pod, container, parts), func() error {
		l := c.Logs(ns, pod, container)
		for _, line := range strings.Split(l, "\n") {
			if containsAll(line, parts) {
				return nil
			}
		}
		return fmt.Errorf("log:\n%s", TailLines(l, 10))
	})
}

func containsAll(s string, parts []string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

// TailLines is the last n lines of s.
func TailLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
