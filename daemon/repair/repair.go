// Package repair finds pods on this node that policy says must be captured
// but are running without it — they started before the agent was ready, or
// while it was down and the plugin was not in the chain — and does what
// --repair-mode says: programs their rules late (apply), labels them
// (label), evicts them so they are recreated through the plugin (delete,
// through the Eviction API), or only reports them (off). Each action is
// recorded as an Event on the pod; a failed one is retried after a backoff.
package repair

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	corev1listers "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/sluicemesh/sluice/daemon/events"
	"github.com/sluicemesh/sluice/daemon/podns"
	"github.com/sluicemesh/sluice/daemon/policy"
	"github.com/sluicemesh/sluice/daemon/redirect"
	"github.com/sluicemesh/sluice/daemon/workloads"
)

// The repair modes (--repair-mode).
const (
	ModeApply = "apply"
	ModeLabel = "label"
	// ModeDelete evicts the pod through the Eviction API, which honours
	// PodDisruptionBudgets.
	ModeDelete = "delete"
	// ModeOff only reports (log, Event, metric).
	ModeOff = "off"
)

// The outcomes Repairs counts.
const (
	OutcomeApplied  = "applied"
	OutcomeLabelled = "labelled"
	OutcomeEvicted  = "evicted"
	OutcomeReported = "reported" // --repair-mode=off
	OutcomeFailed   = "failed"
	// An ambient pod enrolled live (a label change), not a repair.
	OutcomeAmbient = "ambient-enrolled"
)

// Outcomes is every outcome, so the metric shows each at 0 from the start.
var Outcomes = []string{OutcomeApplied, OutcomeLabelled, OutcomeEvicted, OutcomeReported, OutcomeFailed, OutcomeAmbient, OutcomeIstioCaptured, OutcomeIstioAdopted}

const (
	// Pods are repaired a few at a time: one slow netns scan or API call
	// must not hold the rest, and a node's worth of late pods must not
	// flood the API server.
	workers = 4
	// The budget for one pod: policy lookup, netns search, apply, API calls.
	perPod = 30 * time.Second
)

// Config configures a Repairer.
type Config struct {
	Policy *policy.Kube
	// Pods and Namespaces are the agent's shared informers
	// (daemon/kubecache): repair registers its handlers on them and reads
	// pods through the pod lister.
	Pods       coreinformers.PodInformer
	Namespaces coreinformers.NamespaceInformer
	Store      *workloads.Store
	// Client labels and evicts pods; the identity needs what the mode
	// uses: patch on pods (label), create on pods/eviction (delete).
	Client kubernetes.Interface
	Events *events.Recorder // nil records nothing
	// HostProc is the host's /proc as the agent sees it (--host-proc).
	HostProc string
	Mode     string
	// Label is what --repair-mode=label sets (--repair-label); empty:
	// sluice.dev/uncaptured=true.
	Label    Label
	NodeName string
	Log      *slog.Logger
	// IstioTakeover adopts sidecar pods istio-cni captured
	// (--istio-takeover); without it they are left to Istio. Ambient pods
	// istio-cni enrolled are always adopted.
	IstioTakeover bool
	// IstioCNI reads and removes istio-cni's capture; nil is the kernel.
	IstioCNI IstioCNI
	// ZtunnelReady reports whether a ztunnel holds its snapshot; an ambient
	// pod istio-cni enrolled is adopted only then. Nil: always.
	ZtunnelReady func() (bool, string)
	// RetryAfter is the wait before a failed repair is tried again,
	// doubling per failure up to maxRetryAfter; 0 means 30s.
	RetryAfter time.Duration
}

// Repairer watches this node's pods for uncaptured ones.
type Repairer struct {
	cfg         Config
	pods        corev1listers.PodLister
	log         *slog.Logger
	redirection *Redirection
	istioCNI    IstioCNI
	// opener opens pod netns found through HostProc; nil without one.
	opener *podns.Opener

	mu sync.Mutex
	// failedAt holds, per pod, the resourceVersion whose repair failed: the
	// same version is not tried again by an event (a replay or resync would
	// loop on it), a newer one is, once; the retry timer tries it again
	// after a backoff.
	failedAt map[types.UID]failure
	// handled are the pods evicted (delete) or reported (off): an update
	// that races the eviction, or any later one, must not act again.
	handled  map[types.UID]bool
	outcomes map[string]int
	// istioLeft holds pods left to istio-cni, reported once.
	istioLeft map[types.UID]bool
	// deferred holds the keys of ambient pods istio-cni enrolled, waiting
	// for a ztunnel before they are adopted.
	deferred map[string]bool

	// swept is closed once every pod cached at start has been queued.
	swept chan struct{}
	// onChecked, set by tests before Run, sees each pod key once checked:
	// the only way to know a pod was left alone on purpose.
	onChecked func(key string)
}

// New validates cfg.
func New(cfg Config) (*Repairer, error) {
	switch cfg.Mode {
	case ModeApply, ModeLabel, ModeDelete, ModeOff:
	default:
		return nil, fmt.Errorf("repair: mode %q: want %s, %s, %s or %s", cfg.Mode, ModeApply, ModeLabel, ModeDelete, ModeOff)
	}
	if cfg.Label == (Label{}) {
		cfg.Label = DefaultLabel
	}
	if err := cfg.Label.Validate(); err != nil {
		return nil, fmt.Errorf("repair: %w", err)
	}
	if cfg.RetryAfter <= 0 {
		cfg.RetryAfter = defaultRetryAfter
	}
	switch {
	case cfg.Policy == nil:
		return nil, errors.New("repair: no Kubernetes policy")
	case cfg.Pods == nil || cfg.Namespaces == nil:
		return nil, errors.New("repair: no pod or namespace informer")
	case cfg.Store == nil:
		return nil, errors.New("repair: no workload store")
	case cfg.Client == nil:
		return nil, errors.New("repair: no Kubernetes client")
	case cfg.Mode == ModeApply && cfg.HostProc == "":
		return nil, errors.New("repair: mode apply needs the host's /proc to find pod netns")
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	r := &Repairer{
		cfg:         cfg,
		pods:        cfg.Pods.Lister(),
		log:         cfg.Log,
		redirection: NewRedirection(cfg.Client, cfg.Log.With("component", "redirection")),
		istioCNI:    cfg.IstioCNI,
		failedAt:    map[types.UID]failure{},
		handled:     map[types.UID]bool{},
		outcomes:    map[string]int{},
		istioLeft:   map[types.UID]bool{},
		deferred:    map[string]bool{},
		swept:       make(chan struct{}),
	}
	if r.istioCNI == nil {
		r.istioCNI = istioKernel{}
	}
	if cfg.HostProc != "" {
		o, err := podns.NewOpener([]string{"/proc"}, cfg.HostProc)
		if err != nil {
			return nil, fmt.Errorf("repair: %w", err)
		}
		r.opener = o
	}
	return r, nil
}

// Run waits for the pod and namespace caches, checks every pod of this
// node, then every pod added or updated, until ctx ends.
func (r *Repairer) Run(ctx context.Context) error {
	pods, namespaces := r.cfg.Pods.Informer(), r.cfg.Namespaces.Informer()
	synced := func(context.Context) (bool, error) { return pods.HasSynced() && namespaces.HasSynced(), nil }
	if err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, synced); err != nil {
		return fmt.Errorf("repair: wait for the pod and namespace caches: %w", err)
	}
	go r.redirection.Run(ctx)
	q := workqueue.NewTypedWithConfig(workqueue.TypedQueueConfig[string]{Name: "repair"})
	// Registered on a synced informer, the handler is first sent every
	// cached pod: that is the sweep at start.
	reg, err := pods.AddEventHandler(r.handler(ctx, q))
	if err != nil {
		q.ShutDown()
		return fmt.Errorf("repair: add pod event handler: %w", err)
	}
	if _, err := namespaces.AddEventHandler(r.namespaceHandler(q)); err != nil {
		q.ShutDown()
		return fmt.Errorf("repair: add namespace event handler: %w", err)
	}
	var wg sync.WaitGroup
	wg.Go(func() { r.requeueDeferred(ctx, q) })
	for range workers {
		wg.Go(func() {
			for r.next(ctx, q) {
			}
		})
	}
	defer func() { q.ShutDown(); wg.Wait() }()
	go r.retryFailed(ctx, q)
	r.log.Info("checking pods for missing capture", "mode", r.cfg.Mode, "node", r.cfg.NodeName)
	if err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(context.Context) (bool, error) {
		return reg.HasSynced(), nil
	}); err == nil {
		close(r.swept)
	}
	<-ctx.Done()
	return nil
}

// handler queues pods that may be uncaptured; the checks that cost
// something run on the workers.
func (r *Repairer) handler(ctx context.Context, q workqueue.TypedInterface[string]) cache.ResourceEventHandler {
	enqueue := func(obj any) {
		pod, ok := obj.(*corev1.Pod)
		if !ok || !settled(pod) {
			return
		}
		if key, err := cache.MetaNamespaceKeyFunc(pod); err == nil {
			q.Add(key)
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
		DeleteFunc: func(obj any) {
			if pod, ok := deletedPod(obj); ok {
				r.mu.Lock()
				delete(r.failedAt, pod.UID)
				delete(r.istioLeft, pod.UID)
				delete(r.handled, pod.UID)
				r.mu.Unlock()
				go r.releaseLate(ctx, pod.UID)
			}
		},
	}
}

// next checks one queued pod; false once the queue is shut down. The
// queue never hands out a key being worked on, so one pod is never
// repaired twice at once.
func (r *Repairer) next(ctx context.Context, q workqueue.TypedInterface[string]) bool {
	key, shutdown := q.Get()
	if shutdown {
		return false
	}
	defer q.Done(key)
	ctx, cancel := context.WithTimeout(ctx, perPod)
	defer cancel()
	r.check(ctx, key)
	r.log.Debug("checked pod for missing capture", "pod", key)
	if r.onChecked != nil {
		r.onChecked(key)
	}
	return true
}

// check repairs the pod at key if it is settled, uncaptured, and policy
// wants it captured.
func (r *Repairer) check(ctx context.Context, key string) {
	namespace, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return
	}
	pod, err := r.pods.Pods(namespace).Get(name)
	if err != nil || !settled(pod) {
		return
	}
	r.mu.Lock()
	f, failed := r.failedAt[pod.UID]
	handled := r.handled[pod.UID]
	r.mu.Unlock()
	if failed && f.version == pod.ResourceVersion {
		return
	}
	recs := r.records(pod.UID)
	if len(recs) == 0 && (r.cfg.Mode == ModeLabel && r.cfg.Label.On(pod) || (r.cfg.Mode == ModeOff || r.cfg.Mode == ModeDelete) && handled) {
		return
	}
	d, err := r.cfg.Policy.Decide(ctx, policy.Pod{Namespace: namespace, Name: name, UID: string(pod.UID)})
	if err != nil {
		if len(recs) == 0 {
			r.failed(pod, fmt.Errorf("ask policy about pod %s: %w", key, err))
		}
		return
	}
	if len(recs) > 0 {
		if err := r.reconcileEnrolled(ctx, pod, recs, d); err != nil {
			r.failed(pod, err)
			return
		}
		r.mu.Lock()
		delete(r.failedAt, pod.UID)
		r.mu.Unlock()
		return
	}
	if !d.Capture {
		return
	}
	if r.istioHandled(ctx, pod, d) {
		return
	}
	outcome, err := r.act(ctx, pod, d)
	if err != nil {
		r.failed(pod, err)
		return
	}
	r.succeeded(pod, outcome)
}

// act does to a pod running uncaptured what --repair-mode says; an ambient
// pod is enrolled whatever the mode (a live label change, not a repair).
func (r *Repairer) act(ctx context.Context, pod *corev1.Pod, d policy.Decision) (string, error) {
	switch {
	case d.Spec.Mode == redirect.ModeAmbient:
		return OutcomeAmbient, r.enrollAmbient(ctx, pod, d)
	case r.cfg.Mode == ModeApply:
		return r.apply(ctx, pod, d)
	case r.cfg.Mode == ModeLabel:
		return r.label(ctx, pod)
	case r.cfg.Mode == ModeDelete:
		return r.evict(ctx, pod)
	case r.cfg.Mode == ModeOff:
		return r.report(pod)
	}
	return "", fmt.Errorf("--repair-mode %q: unknown", r.cfg.Mode)
}

func (r *Repairer) succeeded(pod *corev1.Pod, outcome string) {
	r.mu.Lock()
	delete(r.failedAt, pod.UID)
	r.outcomes[outcome]++
	r.mu.Unlock()
}

// records are the pod's enrolled attachments.
func (r *Repairer) records(uid types.UID) []workloads.Record {
	var out []workloads.Record
	for _, rec := range r.cfg.Store.List() {
		if rec.PodUID == string(uid) {
			out = append(out, rec)
		}
	}
	return out
}

// Repairs counts uncaptured pods handled since start, by outcome
// (Outcomes).
func (r *Repairer) Repairs() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.outcomes)
}

// deletedPod is the pod of an informer's delete notification, which may
// come as a tombstone when the watch missed the delete itself.
func deletedPod(obj any) (*corev1.Pod, bool) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	pod, ok := obj.(*corev1.Pod)
	return pod, ok
}
