// Package controlplane is the control-plane test tier: Kubernetes objects
// in, kernel state (as nft text), annotations and Events out, as Cilium
// tests its control plane. A Node holds client-go's fake clientset and,
// over it, the agent's real parts: its informers (daemon/kubecache),
// policy.Kube, a workloads.Store, the Event recorder and the ambient owner
// (ambientmesh.Mesh, with its redirection annotator), each built by the
// constructor the agent builds it with. Only the kernel is fake (redirecttest), with a host /proc of
// plain files where a running pod's netns is found, a ztunnel that acks or
// refuses, and istio-cni's capture per netns. It needs no root and no API
// server, so the running-pod logic (podcheck's order, ambientpods,
// istioadopt) and the CNI ADD run as uid 65534 in milliseconds.
//
// It sits beside the root tier (test/harness/podtest: a real API server,
// real netns and nftables), never instead of it: the fakes here prove the
// decisions, the root tests prove the kernel does what they ask.
package controlplane

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/sluicemesh/sluice/daemon/ambientmesh"
	"github.com/sluicemesh/sluice/daemon/events"
	"github.com/sluicemesh/sluice/daemon/kubecache"
	"github.com/sluicemesh/sluice/daemon/policy"
	"github.com/sluicemesh/sluice/daemon/redirect"
	"github.com/sluicemesh/sluice/daemon/redirect/redirecttest"
	"github.com/sluicemesh/sluice/daemon/workloads"
	"github.com/sluicemesh/sluice/test/harness/nstest"
)

// NodeName is the node every Node's pods are scheduled on.
const NodeName = "node-a"

// ExcludedNamespace is passed through by policy, as the agent's
// --exclude-namespaces default does.
const ExcludedNamespace = "kube-system"

// Node is one node's control plane over fakes. Objects are put in with
// Namespace and Pod before Start; Start runs the informers.
type Node struct {
	Client  *fake.Clientset
	Cache   *kubecache.Cache
	Policy  *policy.Kube
	Kernel  *redirecttest.Fake
	Netns   *redirecttest.Namespaces
	Store   *workloads.Store
	Events  *events.Recorder
	Ztunnel *Ztunnel
	Istio   *Istio
	// Mesh is the agent's one ambient owner (and its redirection
	// annotator), shared by the ADD path and the running-pod jobs as the
	// agent shares it.
	Mesh *ambientmesh.Mesh
	// Proc is the fake host /proc (--host-proc) running pods are found in.
	Proc *Proc
	Log  *slog.Logger

	ctx       context.Context
	cancel    context.CancelFunc
	watched   *watches
	nextIP    int
	sandboxes int
}

// New builds a Node with ambient enabled (Istio's default enablement
// selectors) and ztunnel connected. Its informers run once Start is called.
func New(t *testing.T) *Node {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(testWriter{t}, nil))
	}
	n := &Node{Client: fake.NewClientset(), Kernel: redirecttest.NewFake(), Netns: redirecttest.NewNamespaces(t),
		Ztunnel: &Ztunnel{connected: true}, Istio: NewIstio(), Proc: NewProc(t), Log: log, watched: &watches{open: map[string]bool{}}}
	n.Client.PrependWatchReactor("*", n.watched.observe)
	var err error
	if n.Cache, err = kubecache.New(n.Client, NodeName, log); err != nil {
		t.Fatal(err)
	}
	n.Policy, err = policy.NewKube(policy.KubeConfig{Client: n.Client, Pods: n.Cache.Pods, Namespaces: n.Cache.Namespaces,
		NodeName: NodeName, ExcludeNamespaces: []string{ExcludedNamespace}, Base: redirect.DefaultSpec(),
		Ambient: &policy.AmbientConfig{Base: redirect.DefaultAmbientSpec(), DNSCapture: true}, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	n.Netns.Add(hostNetns)
	host, err := n.Netns.Open(hostNetns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { host.Close() })
	n.Store, err = workloads.Open(workloads.Config{Dir: t.TempDir(), Opener: n.Netns, Kernel: n.Kernel, Log: log,
		Ambient: &workloads.Ambient{Ztunnel: n.Ztunnel, Host: host}})
	if err != nil {
		t.Fatal(err)
	}
	n.Events = events.New(events.Config{Client: n.Client, NodeName: NodeName, Log: log})
	n.Mesh = ambientmesh.New(n.Store, n.Client, log.With("component", "redirection"))
	n.ctx, n.cancel = context.WithCancel(context.Background())
	t.Cleanup(func() {
		n.cancel()
		n.Events.Shutdown(context.Background())
	})
	return n
}

// hostNetns is the stand-in for the node's own netns, where the host probe
// table of ambient pods lives.
const hostNetns = "/proc/1/ns/net"

// Context ends when the test does.
func (n *Node) Context() context.Context { return n.ctx }

// Start runs the informers until the test ends and returns once they have
// listed and watch: client-go's fake delivers no change made between an
// informer's list and its watch, so a change made earlier would be lost.
// Its cleanup ends them itself: cleanups run last registered first, so
// New's, which cancels the Node's context, would run only after it.
func (n *Node) Start(t *testing.T) {
	t.Helper()
	done := make(chan struct{})
	go func() { n.Cache.Run(n.ctx); close(done) }()
	t.Cleanup(func() { n.cancel(); <-done })
	n.Eventually(t, func() bool {
		return n.Cache.Pods.Informer().HasSynced() && n.Cache.Namespaces.Informer().HasSynced() &&
			n.watched.has("pods") && n.watched.has("namespaces")
	}, "the informers never synced and watched")
}

// Eventually waits up to 5 s for cond, failing t with msg.
func (n *Node) Eventually(t *testing.T, cond func() bool, msg string, args ...any) {
	t.Helper()
	nstest.Eventually(t, 5*time.Second, cond, msg, args...)
}

// Flush sends every Event queued and stops the recorder: what Events reads
// next is all there will be. Call it after the last step.
func (n *Node) Flush() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	n.Events.Shutdown(ctx)
}

// watches records which resources have a watch open on the fake clientset.
type watches struct {
	mu   sync.Mutex
	open map[string]bool
}

// observe is a watch reactor that only looks: it never handles the call.
func (w *watches) observe(a k8stesting.Action) (bool, watch.Interface, error) {
	w.mu.Lock()
	w.open[a.GetResource().Resource] = true
	w.mu.Unlock()
	return false, nil, nil
}

func (w *watches) has(resource string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.open[resource]
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}
