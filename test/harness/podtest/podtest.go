// Package podtest is test support for the packages that act on this
// node's running pods (podcheck, repair, istioadopt, redirection,
// ambientpods): the agent's parts against test/harness/kubetest's API server,
// run as the agent's user bound to its shipped ClusterRole, pods created
// and set running as a kubelet would, and pod sandboxes as a runtime
// leaves them.
package podtest

import (
	"context"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/sluicemesh/sluice/daemon/events"
	"github.com/sluicemesh/sluice/daemon/kubecache"
	"github.com/sluicemesh/sluice/daemon/podns"
	"github.com/sluicemesh/sluice/daemon/policy"
	"github.com/sluicemesh/sluice/daemon/redirect"
	"github.com/sluicemesh/sluice/daemon/redirect/kernel"
	"github.com/sluicemesh/sluice/daemon/workloads"
	"github.com/sluicemesh/sluice/test/harness/kubetest"
	"github.com/sluicemesh/sluice/test/harness/nstest"
	"github.com/sluicemesh/sluice/test/harness/proctest"
)

const (
	// Agent is the identity policy, the checks and events run as: bound
	// to deploy/rbac/clusterrole.yaml and nothing else.
	Agent = "sluice-agent"
	// rbacFile is relative to a test's package directory, daemon/<pkg>.
	rbacFile = "../../deploy/rbac/clusterrole.yaml"
)

// shared starts the API server on first use, so the pure tests never pay
// for it; one per test binary.
var shared = &kubetest.Shared{User: Agent, RBACFile: rbacFile}

// Stop stops the API server if a test started it; TestMain calls it after
// m.Run.
func Stop() { shared.Stop() }

// Kube returns the shared Env and an admin client, starting the API server
// on first use.
func Kube(t *testing.T) (*kubetest.Env, kubernetes.Interface) {
	t.Helper()
	nstest.RequireRoot(t)
	testEnv := shared.Get(t)
	return testEnv, kubernetes.NewForConfigOrDie(testEnv.AdminConfig())
}

// Parts is what the agent wires together around the running-pod checks.
type Parts struct {
	Node   string // unique per test: a check sees only its own test's pods
	Cache  *kubecache.Cache
	Policy *policy.Kube
	Store  *workloads.Store
	Events *events.Recorder
	Client kubernetes.Interface
}

// Start runs the informers, the policy, a store and an event recorder as
// the agent would, as its user, until t ends.
func Start(t *testing.T) *Parts {
	t.Helper()
	e, _ := Kube(t)
	log := Log(t)
	node := "node-" + strconv.FormatInt(nodeSeq.Add(1), 10)
	c, k := NewKube(t, node, log)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	opener, err := podns.NewOpener([]string{t.TempDir(), "/proc"}, "/proc")
	if err != nil {
		t.Fatal(err)
	}
	store, err := workloads.Open(workloads.Config{Dir: t.TempDir(), Opener: opener, Kernel: kernel.Netlink{}, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	client := kubernetes.NewForConfigOrDie(e.Config(Agent))
	rec := events.New(events.Config{Client: client, NodeName: node, Log: log})
	t.Cleanup(func() { rec.Shutdown(context.Background()) })
	return &Parts{Node: node, Cache: c, Policy: k, Store: store, Events: rec, Client: client}
}

// NewKube builds the agent's informers for node (not running) and a Kube
// policy over them, as the agent's user.
func NewKube(t *testing.T, node string, log *slog.Logger) (*kubecache.Cache, *policy.Kube) {
	t.Helper()
	e, _ := Kube(t)
	client := kubernetes.NewForConfigOrDie(e.Config(Agent))
	c, err := kubecache.New(client, node, log)
	if err != nil {
		t.Fatal(err)
	}
	k, err := policy.NewKube(policy.KubeConfig{Client: client, Pods: c.Pods, Namespaces: c.Namespaces,
		NodeName: node, ExcludeNamespaces: []string{"kube-system"}, Base: redirect.DefaultSpec(), Log: log})
	if err != nil {
		t.Fatal(err)
	}
	return c, k
}

// Log writes to t's log.
func Log(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, nil))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(string(p))
	return len(p), nil
}

var nsSeq, nodeSeq atomic.Int64

// Namespace creates a namespace of its own for the test.
func Namespace(t *testing.T, c kubernetes.Interface) string {
	t.Helper()
	name := "r" + strconv.FormatInt(nsSeq.Add(1), 10)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if _, err := c.CoreV1().Namespaces().Create(context.Background(), ns, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace %s: %v", name, err)
	}
	return name
}

// CreatePod creates a pod on the test's node: injected, as Istio's
// injector leaves a sidecar pod, or plain.
func (a *Parts) CreatePod(t *testing.T, c kubernetes.Interface, ns, name string, injected bool) *corev1.Pod {
	t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       corev1.PodSpec{NodeName: a.Node, Containers: []corev1.Container{{Name: "app", Image: "app"}}},
	}
	if injected {
		p.Annotations = map[string]string{"sidecar.istio.io/status": `{"containers":["istio-proxy"]}`}
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "istio-proxy", Image: "proxyv2"})
	}
	got, err := c.CoreV1().Pods(ns).Create(context.Background(), p, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pod %s/%s: %v", ns, p.Name, err)
	}
	return got
}

// SidecarPod is a pod on node as Istio's injector leaves it, with ann
// added to its annotations.
func SidecarPod(node, name string, ann map[string]string) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{"sidecar.istio.io/status": `{"containers":["istio-proxy"]}`}},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{
			{Name: "app", Image: "app"},
			{Name: "istio-proxy", Image: "proxyv2"},
		}},
	}
	for k, v := range ann {
		p.Annotations[k] = v
	}
	return p
}

// Create creates p in namespace ns, failing t if it cannot.
func Create(t testing.TB, c kubernetes.Interface, ns string, p *corev1.Pod) *corev1.Pod {
	t.Helper()
	got, err := c.CoreV1().Pods(ns).Create(context.Background(), p, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pod %s/%s: %v", ns, p.Name, err)
	}
	return got
}

// SetRunning writes the status a kubelet writes once the sandbox is up.
func SetRunning(t *testing.T, c kubernetes.Interface, p *corev1.Pod, ip netip.Addr) *corev1.Pod {
	t.Helper()
	p = p.DeepCopy()
	p.Status.Phase = corev1.PodRunning
	p.Status.PodIP = ip.String()
	p.Status.PodIPs = []corev1.PodIP{{IP: ip.String()}}
	got, err := c.CoreV1().Pods(p.Namespace).UpdateStatus(context.Background(), p, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("set pod %s/%s running: %v", p.Namespace, p.Name, err)
	}
	return got
}

// Get reads a pod, failing t if it cannot.
func Get(t *testing.T, c kubernetes.Interface, ns, name string) *corev1.Pod {
	t.Helper()
	p, err := c.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Sandbox is a pod's network as a runtime would have left it: a netns with
// the pod's IP on eth0 and a process in it. With inCgroup the process sits
// in a cgroup naming the pod, as the kubelet's cgroupfs driver places it;
// without, only the IP can find it.
func Sandbox(t *testing.T, uid string, ip netip.Addr, inCgroup bool) *nstest.NS {
	t.Helper()
	return SandboxIn(t, nstest.New(t, "pod"), uid, ip, inCgroup)
}

// SandboxIn is Sandbox in the netns pod (one under a node's netns root).
func SandboxIn(t *testing.T, pod *nstest.NS, uid string, ip netip.Addr, inCgroup bool) *nstest.NS {
	t.Helper()
	nstest.Veth(t, pod, "eth0", []string{netip.PrefixFrom(ip, ip.BitLen()).String()}, nstest.New(t, "peer"), "veth0", nil)
	var cg string
	if inCgroup {
		// Made before the process, so removed after it: cleanups run last
		// registered first, and a cgroup with a process cannot go.
		cg = nstest.PodCgroup(t, "cgroupfs", uid)
	}
	cmd := proctest.InNetns(t, pod.Path).Cmd
	if cg != "" {
		if err := os.WriteFile(filepath.Join(cg, "cgroup.procs"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644); err != nil {
			t.Fatalf("move the pod's process into %s: %v", cg, err)
		}
	}
	return pod
}

// EnrolledAs returns the store's record of the pod.
func EnrolledAs(s *workloads.Store, uid string) (workloads.Record, bool) {
	for _, r := range s.List() {
		if r.PodUID == uid {
			return r, true
		}
	}
	return workloads.Record{}, false
}

// WaitEnrolled waits for the store to hold a record of pod.
func (a *Parts) WaitEnrolled(t *testing.T, pod *corev1.Pod) (rec workloads.Record) {
	t.Helper()
	nstest.Eventually(t, 5*time.Second, func() bool {
		var ok bool
		rec, ok = EnrolledAs(a.Store, string(pod.UID))
		return ok
	}, "pod %s/%s never enrolled", pod.Namespace, pod.Name)
	return rec
}

// Events lists the pod's Events as reason×count.
func Events(t *testing.T, c kubernetes.Interface, p *corev1.Pod) []string {
	t.Helper()
	l, err := c.CoreV1().Events(p.Namespace).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, ev := range l.Items {
		if ev.InvolvedObject.UID == p.UID {
			out = append(out, ev.Reason+"×"+strconv.Itoa(int(ev.Count)))
		}
	}
	return out
}

// WaitEventCount waits until the pod's events with reason add up to n, and
// fails if they go past it. The recorder counts repeats on one Event.
func WaitEventCount(t *testing.T, c kubernetes.Interface, p *corev1.Pod, reason string, n int32) {
	t.Helper()
	count := func() int32 {
		l, err := c.CoreV1().Events(p.Namespace).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return -1
		}
		var sum int32
		for _, ev := range l.Items {
			if ev.InvolvedObject.UID == p.UID && ev.Reason == reason {
				sum += ev.Count
			}
		}
		return sum
	}
	nstest.Eventually(t, 10*time.Second, func() bool { return count() >= n }, "fewer than %d %s events", n, reason)
	if got := count(); got != n {
		t.Errorf("%d %s events, want %d", got, reason, n)
	}
}
