package kubecache

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/sluicemesh/sluice/internal/kubetest"
	"github.com/sluicemesh/sluice/internal/nstest"
	"github.com/sluicemesh/sluice/internal/syncbuf"
)

const (
	node = "node-a"
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

// syncedLog is a log the informers' goroutines write while the test reads.
type syncedLog = syncbuf.Buffer

// run runs a Cache for node as rc's user until t ends.
func run(t *testing.T, rc *rest.Config, log *syncedLog) *Cache {
	t.Helper()
	c, err := New(kubernetes.NewForConfigOrDie(rc), node, slog.New(slog.NewTextHandler(log, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return c
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

// The pod cache holds this node's pods only, the namespace cache every
// namespace, both without managed fields; a handler registered late is
// sent what is cached (repair's sweep at start depends on it).
func TestCacheHoldsNodePodsAndNamespaces(t *testing.T) {
	e := shared.Get(t)
	admin := kubernetes.NewForConfigOrDie(e.AdminConfig())
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "cache-test"}}
	if _, err := admin.CoreV1().Namespaces().Create(context.Background(), ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	here := createPod(t, admin, ns.Name, "here", node)
	createPod(t, admin, ns.Name, "elsewhere", "node-b")
	if len(here.ManagedFields) == 0 {
		t.Fatal("the API server set no managed fields: the test proves nothing")
	}
	c := run(t, e.Config(agent), &syncedLog{})
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
	if n, err := c.Namespaces.Lister().Get(ns.Name); err != nil || len(n.ManagedFields) != 0 {
		t.Errorf("namespace %s: %v, %v; want it cached without managed fields", ns.Name, n, err)
	}

	seen := make(chan string, 16)
	reg, err := c.Pods.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { seen <- obj.(*corev1.Pod).Name },
	})
	if err != nil {
		t.Fatal(err)
	}
	nstest.Eventually(t, 10*time.Second, reg.HasSynced, "the handler's replay")
	if name := <-seen; name != "here" {
		t.Errorf("replay sent %s, want here", name)
	}
}

// A list or watch that fails is logged, naming the informer, and retried.
func TestCacheLogsWatchFailures(t *testing.T) {
	rc := shared.Get(t).Config(agent)
	rc.BearerToken = "not-a-token"
	log := &syncedLog{}
	run(t, rc, log)
	nstest.Eventually(t, 30*time.Second, func() bool {
		l := log.String()
		return strings.Count(l, `msg="watch failed; retrying"`) >= 2 &&
			strings.Contains(l, "informer=pods") && strings.Contains(l, "informer=namespaces")
	}, "a logged list failure of each informer: %v", log)
}
