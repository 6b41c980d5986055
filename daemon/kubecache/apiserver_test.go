//go:build !noapiserver

// The real kube-apiserver tier: compiled out by -tags noapiserver, which
// the non-root unit run uses (it ran as root in the same `make test`).

package kubecache

import (
	"context"
	"maps"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/sluicemesh/sluice/test/harness/kubetest"
	"github.com/sluicemesh/sluice/test/harness/nstest"
)

const (
	// agent is the identity the informers run as: bound to
	// deploy/rbac/clusterrole.yaml and nothing else.
	agent    = "sluice-agent"
	rbacFile = "../../deploy/rbac/clusterrole.yaml"
)

var shared = &kubetest.Shared{User: agent, RBACFile: rbacFile}

func TestMain(m *testing.M) {
	code := m.Run()
	shared.Stop()
	os.Exit(code)
}

// As the agent, under its shipped ClusterRole, the pod cache holds this
// node's pods only (the server filters on spec.nodeName), the namespace
// cache every namespace, its labels as the server has them, and the pods
// without the managed fields the server set.
func TestCacheHoldsNodePodsAndNamespaces(t *testing.T) {
	e := shared.Get(t)
	admin := kubernetes.NewForConfigOrDie(e.AdminConfig())
	// A generated name: the shared API server outlives one run (-count=N).
	ns, err := admin.CoreV1().Namespaces().Create(context.Background(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "cache-test-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	here := createPod(t, admin, ns.Name, "here", node)
	createPod(t, admin, ns.Name, "elsewhere", "node-b")
	if len(here.ManagedFields) == 0 {
		t.Fatal("the API server set no managed fields: the test proves nothing")
	}
	c := run(t, kubernetes.NewForConfigOrDie(e.Config(agent)), &syncedLog{})
	nstest.Eventually(t, 30*time.Second, func() bool {
		return c.Pods.Informer().HasSynced() && c.Namespaces.Informer().HasSynced()
	}, "the caches to sync")

	var got *corev1.Pod
	nstest.Eventually(t, 10*time.Second, func() bool {
		got, _ = c.Pods.Lister().Pods(ns.Name).Get("here")
		return got != nil
	}, "the cache to hold this node's pod")
	if len(got.ManagedFields) != 0 {
		t.Errorf("cached pod keeps %d managed fields", len(got.ManagedFields))
	}
	if _, err := c.Pods.Lister().Pods(ns.Name).Get("elsewhere"); err == nil {
		t.Error("the cache holds a pod of another node")
	}
	if n, ok := c.Namespaces.Get(ns.Name); !ok || n.ResourceVersion != ns.ResourceVersion || !maps.Equal(n.Labels(), ns.Labels) {
		t.Errorf("namespace %s: %+v, %v; want it cached at resourceVersion %s with labels %v", ns.Name, n, ok, ns.ResourceVersion, ns.Labels)
	}
}

func createPod(t *testing.T, c kubernetes.Interface, ns, name, nodeName string) *corev1.Pod {
	t.Helper()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PodSpec{NodeName: nodeName, Containers: []corev1.Container{{Name: "app", Image: "app"}}}}
	got, err := c.CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return got
}
