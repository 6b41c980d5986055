package policy

import (
	"context"
	"log/slog"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/sluicemesh/sluice/daemon/kubecache"
	"github.com/sluicemesh/sluice/daemon/redirect"
	"github.com/sluicemesh/sluice/internal/kubetest"
	"github.com/sluicemesh/sluice/internal/nstest"
)

const (
	node      = "node-a"
	otherNode = "node-b"
	// agent is the identity the policy runs as in these tests: bound to
	// deploy/rbac/clusterrole.yaml and nothing else.
	agent    = "sluice-agent"
	agentNS  = "sluice-system"
	rbacFile = "../../deploy/rbac/clusterrole.yaml"
)

// shared starts the API server on first use, so the pure tests never pay
// for it, with the agent bound to its shipped ClusterRole.
var shared = &kubetest.Shared{User: agent, RBACFile: rbacFile}

func TestMain(m *testing.M) {
	code := m.Run()
	shared.Stop()
	os.Exit(code)
}

// kube returns the shared Env and an admin client, starting the API server
// and granting the agent its ClusterRole on first call.
func kube(t *testing.T) (*kubetest.Env, kubernetes.Interface) {
	t.Helper()
	testEnv := shared.Get(t)
	return testEnv, kubernetes.NewForConfigOrDie(testEnv.AdminConfig())
}

// startPolicy runs a Kube policy as the agent's user until t ends, and
// waits for its caches.
func startPolicy(t *testing.T, lookupWait time.Duration) *Kube {
	t.Helper()
	e, _ := kube(t)
	k, c := newKube(t, e.Config(agent), KubeConfig{
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

// newKube builds a Kube policy for node over the agent's informers (not
// running) as the agent wires it; cfg's client, informers, node and base
// are filled in.
func newKube(t *testing.T, rc *rest.Config, cfg KubeConfig) (*Kube, *kubecache.Cache) {
	t.Helper()
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
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
	got, err := c.CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pod %s/%s: %v", ns, pod.Name, err)
	}
	return Pod{Namespace: ns, Name: got.Name, UID: string(got.UID)}
}
