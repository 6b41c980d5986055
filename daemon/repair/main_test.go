package repair

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
	"github.com/sluicemesh/sluice/internal/kubetest"
	"github.com/sluicemesh/sluice/internal/nstest"
)

const (
	// agent is the identity policy, repair and events run as: bound to
	// deploy/rbac/clusterrole.yaml and nothing else.
	agent    = "sluice-agent"
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
// on first use.
func kube(t *testing.T) (*kubetest.Env, kubernetes.Interface) {
	t.Helper()
	nstest.RequireRoot(t)
	testEnv := shared.Get(t)
	return testEnv, kubernetes.NewForConfigOrDie(testEnv.AdminConfig())
}

// agentParts is what the agent wires together around a Repairer.
type agentParts struct {
	node   string // unique per test: a Repairer sees only its own test's pods
	cache  *kubecache.Cache
	policy *policy.Kube
	store  *workloads.Store
	events *events.Recorder
	client kubernetes.Interface
}

// startAgentParts runs the policy, a store and an event recorder as the
// agent would, as its user, until t ends.
func startAgentParts(t *testing.T) *agentParts {
	t.Helper()
	e, _ := kube(t)
	log := testLog(t)
	node := "node-" + strconv.FormatInt(nodeSeq.Add(1), 10)
	c, k := newKube(t, node, log)
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
	client := kubernetes.NewForConfigOrDie(e.Config(agent))
	rec := events.New(events.Config{Client: client, NodeName: node, Log: log})
	t.Cleanup(func() { rec.Shutdown(context.Background()) })
	return &agentParts{node: node, cache: c, policy: k, store: store, events: rec, client: client}
}

// newKube builds the agent's informers for node (not running) and a Kube
// policy over them, as the agent's user.
func newKube(t *testing.T, node string, log *slog.Logger) (*kubecache.Cache, *policy.Kube) {
	t.Helper()
	e, _ := kube(t)
	client := kubernetes.NewForConfigOrDie(e.Config(agent))
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

// runRepair runs a Repairer in mode until t ends. checked receives the
// key of every pod it has finished checking.
func (a *agentParts) runRepair(t *testing.T, mode string) (r *Repairer, checked <-chan string) {
	t.Helper()
	return a.runRepairWith(t, func(c *Config) { c.Mode = mode })
}

// runRepairWith is runRepair with the Config set by set.
func (a *agentParts) runRepairWith(t *testing.T, set func(*Config)) (r *Repairer, checked <-chan string) {
	t.Helper()
	cfg := Config{Policy: a.policy, Pods: a.cache.Pods, Namespaces: a.cache.Namespaces, Store: a.store, Client: a.client, Events: a.events,
		HostProc: "/proc", NodeName: a.node, Log: testLog(t)}
	set(&cfg)
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan string, 100)
	r.onChecked = func(key string) {
		select {
		case ch <- key:
		default:
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return r, ch
}

func testLog(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, nil))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(string(p))
	return len(p), nil
}

var nsSeq, nodeSeq atomic.Int64

func namespace(t *testing.T, c kubernetes.Interface) string {
	t.Helper()
	name := "r" + strconv.FormatInt(nsSeq.Add(1), 10)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if _, err := c.CoreV1().Namespaces().Create(context.Background(), ns, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace %s: %v", name, err)
	}
	return name
}

// createPod creates a pod on the test's node: injected, as Istio's
// injector leaves a sidecar pod, or plain.
func (a *agentParts) createPod(t *testing.T, c kubernetes.Interface, ns, name string, injected bool) *corev1.Pod {
	t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       corev1.PodSpec{NodeName: a.node, Containers: []corev1.Container{{Name: "app", Image: "app"}}},
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

// setRunning writes the status a kubelet writes once the sandbox is up.
func setRunning(t *testing.T, c kubernetes.Interface, p *corev1.Pod, ip netip.Addr) *corev1.Pod {
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

// sandbox is a pod's network as a runtime would have left it: a netns with
// the pod's IP on eth0 and a process in it. With inCgroup the process sits
// in a cgroup naming the pod, as the kubelet's cgroupfs driver places it;
// without, only the IP can find it.
func sandbox(t *testing.T, uid string, ip netip.Addr, inCgroup bool) *nstest.NS {
	t.Helper()
	pod := nstest.New(t, "pod")
	nstest.Veth(t, pod, "eth0", []string{netip.PrefixFrom(ip, ip.BitLen()).String()}, nstest.New(t, "peer"), "veth0", nil)
	var cg string
	if inCgroup {
		// Made before the process, so removed after it: cleanups run last
		// registered first, and a cgroup with a process cannot go.
		cg = nstest.PodCgroup(t, "cgroupfs", uid)
	}
	cmd := pod.Command("sleep", "300")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	procNet := "/proc/" + strconv.Itoa(cmd.Process.Pid) + "/ns/net"
	want, err := os.Stat(pod.Path)
	if err != nil {
		t.Fatal(err)
	}
	nstest.Eventually(t, 5*time.Second, func() bool {
		got, err := os.Stat(procNet)
		return err == nil && os.SameFile(got, want)
	}, "the pod's process never entered its netns")
	if cg != "" {
		if err := os.WriteFile(filepath.Join(cg, "cgroup.procs"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644); err != nil {
			t.Fatalf("move the pod's process into %s: %v", cg, err)
		}
	}
	return pod
}

// enrolledAs returns the store's record of the pod.
func enrolledAs(s *workloads.Store, uid string) (workloads.Record, bool) {
	for _, r := range s.List() {
		if r.PodUID == uid {
			return r, true
		}
	}
	return workloads.Record{}, false
}
