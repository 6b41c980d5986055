// Package podcheck checks this node's running pods against policy whenever
// a pod or its namespace changes, and hands each to the one job that owns
// its case, in an order that is itself a safety rule: a pod sluice holds
// goes to ambientpods (unenrol, or the annotation); a pod istio-cni
// captures goes to istioadopt, before anything could layer a second
// ruleset on it; an ambient pod to ambientpods (live enrolment); any other
// pod policy wants captured runs uncaptured and goes to repair. A failed
// check is retried through client-go's rate-limited workqueue.
package podcheck

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"time"

	"github.com/vishvananda/netns"
	"k8s.io/apimachinery/pkg/util/wait"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	corev1listers "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/util/workqueue"

	"github.com/sluicemesh/sluice/daemon/ambientmesh"
	"github.com/sluicemesh/sluice/daemon/ambientpods"
	"github.com/sluicemesh/sluice/daemon/events"
	"github.com/sluicemesh/sluice/daemon/istioadopt"
	"github.com/sluicemesh/sluice/daemon/kubecache"
	"github.com/sluicemesh/sluice/daemon/policy"
	"github.com/sluicemesh/sluice/daemon/repair"
	"github.com/sluicemesh/sluice/daemon/workloads"
)

// OutcomeFailed counts every failed try, whichever job it was.
const OutcomeFailed = "failed"

// Outcomes is every outcome counted, so the metric shows each at 0 from
// the start.
var Outcomes = []string{repair.OutcomeApplied, repair.OutcomeLabelled, repair.OutcomeEvicted, repair.OutcomeReported, OutcomeFailed,
	ambientpods.OutcomeEnrolled, istioadopt.OutcomeCaptured, istioadopt.OutcomeAdopted}

const (
	// Pods are checked a few at a time: one slow netns scan or API call
	// must not hold the rest, and a node's worth of uncaptured pods must
	// not flood the API server.
	workers = 4
	// The budget for one pod: policy lookup, netns search, apply, API calls.
	perPod = 30 * time.Second
	// defaultRetryAfter is the first wait before a failed check is tried
	// again without an event on the pod: a netns not found yet, an API
	// call that failed, a PodDisruptionBudget that said not now.
	defaultRetryAfter = 30 * time.Second
	// maxRetryAfter caps the doubling by default: a pod that keeps failing
	// is still tried every few minutes, and counted each time.
	maxRetryAfter = 10 * time.Minute
)

// Config configures a Checker and the jobs it hands pods to.
type Config struct {
	Policy *policy.Kube
	// Pods and Namespaces are the agent's shared informers
	// (daemon/kubecache): the Checker registers its handlers on them and
	// reads pods through the pod lister.
	Pods       coreinformers.PodInformer
	Namespaces *kubecache.Namespaces
	Store      *workloads.Store
	// Client labels, evicts and annotates pods; the identity needs what
	// the mode uses: patch on pods/status (label, annotation), create on
	// pods/eviction (delete).
	Client kubernetes.Interface
	Events *events.Recorder // nil records nothing
	// HostProc is the host's /proc as the agent sees it (--host-proc).
	HostProc string
	Mode     string       // --repair-mode
	Label    repair.Label // --repair-label
	NodeName string
	Log      *slog.Logger
	// IstioTakeover adopts sidecar pods istio-cni captured
	// (--istio-takeover).
	IstioTakeover bool
	// Mesh enrols ambient pods and marks them (the agent's one
	// ambientmesh.Mesh); nil builds one over Store and Client.
	Mesh *ambientmesh.Mesh
	// IstioCNI reads and removes istio-cni's capture; nil is the kernel.
	IstioCNI istioadopt.Kernel
	// IstioOpen opens a pod netns for IstioCNI to read; nil is a
	// podns.Opener on HostProc (istioadopt.Config.Open).
	IstioOpen func(path string) (netns.NsHandle, error)
	// ZtunnelReady reports whether a ztunnel holds its snapshot; an ambient
	// pod istio-cni enrolled is adopted only then. Nil: always.
	ZtunnelReady func() (bool, string)
	// RetryAfter is the wait before a failed check is tried again,
	// doubling per failure up to MaxRetryAfter; 0 means 30s.
	RetryAfter time.Duration
	// MaxRetryAfter caps the doubling; 0 means 10m, and it is never below
	// RetryAfter. A test that waits for a timer's retry sets it, so the
	// wait cannot outgrow the test's deadline however many tries failed
	// first.
	MaxRetryAfter time.Duration
}

// Checker watches this node's pods and routes each to its job.
type Checker struct {
	cfg     Config
	pods    corev1listers.PodLister
	log     *slog.Logger
	mesh    *ambientmesh.Mesh
	repair  *repair.Repairer
	adopter *istioadopt.Adopter
	ambient *ambientpods.Enroller
	// retries spaces a failing pod's tries: client-go's per-item
	// exponential backoff, RetryAfter doubling up to MaxRetryAfter.
	retries workqueue.TypedRateLimiter[string]

	mu sync.Mutex
	// failedAt holds, per pod key, the resourceVersion whose check failed
	// and when its retry is due: the same version is not tried again by an
	// event before then (a replay or resync would loop on it), a newer one
	// is, once.
	failedAt map[string]failure
	outcomes map[string]int

	// swept is closed once every pod cached at start has been queued.
	swept chan struct{}
	// onChecked, set by tests before Run, sees each pod key once checked:
	// the only way to know a pod was left alone on purpose.
	onChecked func(key string)
}

type failure struct {
	version string
	due     time.Time
}

// New validates cfg and builds the jobs.
func New(cfg Config) (*Checker, error) {
	switch {
	case cfg.Policy == nil:
		return nil, errors.New("repair: no Kubernetes policy")
	case cfg.Pods == nil || cfg.Namespaces == nil:
		return nil, errors.New("repair: no pod or namespace informer")
	}
	if cfg.RetryAfter <= 0 {
		cfg.RetryAfter = defaultRetryAfter
	}
	if cfg.MaxRetryAfter <= 0 {
		cfg.MaxRetryAfter = maxRetryAfter
	}
	cfg.MaxRetryAfter = max(cfg.MaxRetryAfter, cfg.RetryAfter)
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	rep, err := repair.New(repair.Config{Store: cfg.Store, Client: cfg.Client, Events: cfg.Events, HostProc: cfg.HostProc,
		Mode: cfg.Mode, Label: cfg.Label, Log: cfg.Log})
	if err != nil {
		return nil, err
	}
	mesh := cfg.Mesh
	if mesh == nil {
		mesh = ambientmesh.New(cfg.Store, cfg.Client, cfg.Log.With("component", "redirection"))
	}
	adopter, err := istioadopt.NewAdopter(istioadopt.Config{Store: cfg.Store, HostProc: cfg.HostProc, Takeover: cfg.IstioTakeover,
		Kernel: cfg.IstioCNI, Open: cfg.IstioOpen, ZtunnelReady: cfg.ZtunnelReady, Events: cfg.Events, Mesh: mesh, Log: cfg.Log})
	if err != nil {
		return nil, err
	}
	return &Checker{
		cfg:      cfg,
		pods:     cfg.Pods.Lister(),
		log:      cfg.Log,
		mesh:     mesh,
		repair:   rep,
		adopter:  adopter,
		ambient:  &ambientpods.Enroller{Mesh: mesh, HostProc: cfg.HostProc, Events: cfg.Events, Log: cfg.Log},
		retries:  workqueue.NewTypedItemExponentialFailureRateLimiter[string](cfg.RetryAfter, cfg.MaxRetryAfter),
		failedAt: map[string]failure{},
		outcomes: map[string]int{},
		swept:    make(chan struct{}),
	}, nil
}

// Mesh is the ambient owner whose annotator the Checker keeps retrying
// (Run runs it).
func (c *Checker) Mesh() *ambientmesh.Mesh { return c.mesh }

// Run waits for the pod and namespace caches, checks every pod of this
// node, then every pod added or updated, until ctx ends.
func (c *Checker) Run(ctx context.Context) error {
	pods, namespaces := c.cfg.Pods.Informer(), c.cfg.Namespaces.Informer()
	synced := func(context.Context) (bool, error) { return pods.HasSynced() && namespaces.HasSynced(), nil }
	if err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, synced); err != nil {
		return fmt.Errorf("repair: wait for the pod and namespace caches: %w", err)
	}
	go c.mesh.Run(ctx)
	q := workqueue.NewTypedRateLimitingQueueWithConfig(c.retries, workqueue.TypedRateLimitingQueueConfig[string]{Name: "repair"})
	// Registered on a synced informer, the handler is first sent every
	// cached pod: that is the sweep at start.
	reg, err := pods.AddEventHandler(c.podHandler(ctx, q))
	if err != nil {
		q.ShutDown()
		return fmt.Errorf("repair: add pod event handler: %w", err)
	}
	if _, err := namespaces.AddEventHandler(c.namespaceHandler(q)); err != nil {
		q.ShutDown()
		return fmt.Errorf("repair: add namespace event handler: %w", err)
	}
	var wg sync.WaitGroup
	wg.Go(func() { c.adopter.RequeueDeferred(ctx, func(key string) { q.Add(key) }) })
	for range workers {
		wg.Go(func() {
			for c.next(ctx, q) {
			}
		})
	}
	defer func() { q.ShutDown(); wg.Wait() }()
	c.log.Info("checking pods for missing capture", "mode", c.cfg.Mode, "node", c.cfg.NodeName)
	if err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(context.Context) (bool, error) {
		return reg.HasSynced(), nil
	}); err == nil {
		close(c.swept)
	}
	<-ctx.Done()
	return nil
}

// Counts are the pods handled since start, by outcome (Outcomes).
func (c *Checker) Counts() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.outcomes)
}
