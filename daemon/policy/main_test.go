package policy

import (
	"context"
	"log/slog"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"

	"github.com/sluicemesh/sluice/daemon/kubecache"
	"github.com/sluicemesh/sluice/daemon/redirect"
	"github.com/sluicemesh/sluice/test/harness/nstest"
)

// The policy's decisions run on client-go's fake clientset, as non-root
// in milliseconds; apiserver_test.go holds what needs a real
// kube-apiserver: the agent's RBAC, the node-filtered watch, the watch's
// timing and the API server going away.

const (
	node      = "node-a"
	otherNode = "node-b"
	agentNS   = "sluice-system"
)

// runPolicy runs a Kube policy over client until t ends, and waits for its
// caches.
func runPolicy(t *testing.T, client kubernetes.Interface, lookupWait time.Duration) *Kube {
	t.Helper()
	k, c := newKubeOn(t, client, KubeConfig{
		ExcludeNamespaces: []string{"kube-system", agentNS},
		LookupWait:        lookupWait,
		Log:               slog.New(slog.NewTextHandler(testWriter{t}, nil)),
	})
	if ok, _ := k.Synced(); ok {
		t.Fatal("Synced before the informers run")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	nstest.Eventually(t, 30*time.Second, func() bool { ok, _ := k.Synced(); return ok }, "policy caches to sync")
	return k
}

// fakePolicy runs a Kube policy over a fake clientset holding objs. The
// fake's watch can miss an object created while it starts, so a short
// lookup wait lets Decide's direct GET find what the cache missed: these
// tests are about what is decided, not how the pod was found.
func fakePolicy(t *testing.T, objs ...runtime.Object) (*Kube, kubernetes.Interface) {
	t.Helper()
	c := fake.NewClientset(objs...)
	return runPolicy(t, c, 50*time.Millisecond), c
}

// newKube builds a Kube policy for node over rc's informers (not running)
// as the agent wires it; cfg's client, informers, node and base are
// filled in.
func newKube(t *testing.T, rc *rest.Config, cfg KubeConfig) (*Kube, *kubecache.Cache) {
	t.Helper()
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	return newKubeOn(t, client, cfg)
}

// newKubeOn is newKube over a client.
func newKubeOn(t *testing.T, client kubernetes.Interface, cfg KubeConfig) (*Kube, *kubecache.Cache) {
	t.Helper()
	c, err := kubecache.New(client, node, cfg.Log)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Client, cfg.Pods, cfg.Namespaces, cfg.NodeName, cfg.Base = client, c.Pods, c.Namespaces, node, redirect.DefaultSpec()
	k, err := NewKube(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return k, c
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(string(p))
	return len(p), nil
}

var nsSeq atomic.Int64

// namespace creates a fresh namespace for one test.
func namespace(t *testing.T, c kubernetes.Interface, labels map[string]string) string {
	t.Helper()
	name := "t" + strconv.FormatInt(nsSeq.Add(1), 10)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	if _, err := c.CoreV1().Namespaces().Create(context.Background(), ns, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace %s: %v", name, err)
	}
	return name
}

// createPod creates pod (an injected() pod, say) in ns on nodeName and
// returns what the runtime would pass for it.
func createPod(t *testing.T, c kubernetes.Interface, ns, nodeName string, pod *corev1.Pod) Pod {
	t.Helper()
	pod = pod.DeepCopy()
	pod.Namespace = ns
	pod.Spec.NodeName = nodeName
	// The fake clientset assigns no UID; a real API server replaces it.
	pod.UID = types.UID("uid-" + ns + "-" + pod.Name)
	got, err := c.CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pod %s/%s: %v", ns, pod.Name, err)
	}
	return Pod{Namespace: ns, Name: got.Name, UID: string(got.UID)}
}
