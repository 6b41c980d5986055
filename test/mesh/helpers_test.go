package mesh

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/sluicemesh/sluice/test/harness/nodetest"
	"github.com/sluicemesh/sluice/test/harness/nstest"
)

const labelDataplane = "istio.io/dataplane-mode"

// eventually polls cond until it returns nil, failing t with the last
// error after timeout.
func eventually(t testing.TB, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	if err := waitFor(t.Context(), timeout, what, cond); err != nil {
		t.Fatal(err)
	}
}

func client(t testing.TB) *kubernetes.Clientset {
	t.Helper()
	return cluster.ClientT(t)
}

// namespace creates a namespace of the test's own, with labels, and
// deletes it when the test ends.
func namespace(t *testing.T, labels map[string]string) string {
	t.Helper()
	return cluster.TestNamespace(t, labels)
}

// serviceAccount creates a ServiceAccount in ns: a pod's mesh identity.
func serviceAccount(t *testing.T, ns, name string) {
	t.Helper()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if _, err := client(t).CoreV1().ServiceAccounts(ns).Create(t.Context(), sa, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create ServiceAccount %s/%s: %v", ns, name, err)
	}
}

// logs is a container's log (nodetest's Logs).
func logs(t testing.TB, ns, pod, container string) string {
	return cluster.Logs(ns, pod, container)
}

// onePod is the one pod, not being deleted, that selector picks in ns, on
// node ("": on any node). ztunnel and the agent run one per node: the
// tests read the first node's, where their pods run unless a test puts
// one on another (onNode).
func onePod(t testing.TB, ns, selector, node string) (*corev1.Pod, error) {
	opts := metav1.ListOptions{LabelSelector: selector}
	if node != "" {
		opts.FieldSelector = "spec.nodeName=" + node
	}
	l, err := client(t).CoreV1().Pods(ns).List(t.Context(), opts)
	if err != nil {
		return nil, err
	}
	var found []corev1.Pod
	for _, p := range l.Items {
		if p.DeletionTimestamp == nil {
			found = append(found, p)
		}
	}
	if len(found) != 1 {
		return nil, fmt.Errorf("%d pods match %s in %s on node %q", len(found), selector, ns, node)
	}
	return &found[0], nil
}

// readyPod waits for exactly one Ready pod matching selector in ns on
// node ("": any).
func readyPod(t testing.TB, ns, selector, node string, timeout time.Duration) *corev1.Pod {
	t.Helper()
	var p *corev1.Pod
	eventually(t, timeout, "one Ready pod "+selector+" in "+ns, func() error {
		var err error
		if p, err = onePod(t, ns, selector, node); err != nil {
			return err
		}
		if !nodetest.PodReady(p) {
			return fmt.Errorf("%s not Ready: %s", p.Name, nodetest.PodState(p))
		}
		return nil
	})
	return p
}

// nodeNetns is the node's network namespace: a client there is outside
// the mesh, as the kubelet is.
func nodeNetns() *nstest.NS {
	return &nstest.NS{Name: "node", Path: cluster.NetnsPath()}
}

// get fetches url from the node's netns and returns the body.
func get(url string) (string, error) {
	return getIn(nodeNetns(), url)
}

// getIn fetches url with connections made in ns and returns the body.
func getIn(ns *nstest.NS, url string) (string, error) {
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DisableKeepAlives: true,
		DialContext: func(_ context.Context, network, addr string) (net.Conn, error) {
			return ns.Dial(network, addr, 3*time.Second)
		},
	}}
	resp, err := c.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", fmt.Errorf("read %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s: %.300s", url, resp.Status, b)
	}
	return string(b), nil
}
