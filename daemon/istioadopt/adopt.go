package istioadopt

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/vishvananda/netns"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sluicemesh/sluice/daemon/events"
	"github.com/sluicemesh/sluice/daemon/late"
	"github.com/sluicemesh/sluice/daemon/podns"
	"github.com/sluicemesh/sluice/daemon/policy"
	"github.com/sluicemesh/sluice/daemon/redirect"
	"github.com/sluicemesh/sluice/daemon/workloads"
)

// The outcomes of a pod istio-cni captured, counted beside the repairs.
const (
	// Left to Istio: --istio-takeover is off and the pod is a sidecar pod.
	OutcomeCaptured = "istio-captured"
	// Taken over: sluice's table in, Istio's out, the pod journaled.
	OutcomeAdopted = "istio-adopted"
)

// A pod with no sluice record that istio-cni captured is not uncaptured:
// its proxy already gets its traffic. Layering sluice's table on it would
// capture it twice, so before any repair or live enrolment the pod's netns
// is read for Istio's rules (podcheck asks the Adopter first). A sidecar
// pod is left to Istio unless --istio-takeover; an ambient pod is always
// adopted, as ztunnel holds it only while this agent lists it (pending.go).

// Config configures an Adopter.
type Config struct {
	Store *workloads.Store
	// HostProc is the host's /proc as the agent sees it (--host-proc);
	// empty: pod netns cannot be found, and no pod is adopted.
	HostProc string
	// Takeover adopts sidecar pods istio-cni captured (--istio-takeover);
	// without it they are left to Istio. Ambient pods istio-cni enrolled
	// are always adopted.
	Takeover bool
	// Kernel reads and removes istio-cni's capture; nil is Netlink.
	Kernel Kernel
	// Open opens a pod netns found under HostProc; nil is a podns.Opener
	// on HostProc. The control-plane tests (test/harness/controlplane)
	// give redirecttest's stand-ins, which need no root.
	Open func(path string) (netns.NsHandle, error)
	// ZtunnelReady reports whether a ztunnel holds its snapshot; an
	// ambient pod istio-cni enrolled is adopted only then. Nil: always.
	ZtunnelReady func() (bool, string)
	Events       *events.Recorder // nil records nothing
	Mesh         Marker           // marks an adopted ambient pod; nil marks nothing
	Log          *slog.Logger
}

// Marker marks an adopted ambient pod for istiod: the ambient owner's
// (ambientmesh.Mesh), which imports this package for the pending list
// its ZDS server sends.
type Marker interface {
	Mark(ctx context.Context, pod policy.Pod, value string)
}

// Adopter takes pods over from istio-cni, or leaves them to it.
type Adopter struct {
	cfg    Config
	log    *slog.Logger
	kernel Kernel
	// open opens pod netns found through HostProc; nil without one.
	open func(path string) (netns.NsHandle, error)

	mu sync.Mutex
	// left holds pods left to istio-cni, reported once.
	left map[types.UID]bool
	// deferred holds the keys of ambient pods istio-cni enrolled, waiting
	// for a ztunnel before they are adopted.
	deferred map[string]bool
}

// NewAdopter opens the host's /proc for pod netns.
func NewAdopter(cfg Config) (*Adopter, error) {
	if cfg.Store == nil {
		return nil, errors.New("istio-cni adoption: no workload store")
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	a := &Adopter{cfg: cfg, log: cfg.Log, kernel: cfg.Kernel, open: cfg.Open, left: map[types.UID]bool{}, deferred: map[string]bool{}}
	if a.kernel == nil {
		a.kernel = Netlink{}
	}
	switch {
	case cfg.HostProc == "":
		a.open = nil
	case a.open == nil:
		o, err := podns.NewOpener([]string{"/proc"}, cfg.HostProc)
		if err != nil {
			return nil, fmt.Errorf("istio-cni adoption: %w", err)
		}
		a.open = o.Open
	}
	return a, nil
}

// Check handles the pod if istio-cni captures it: handled is false when it
// does not (or its netns cannot be found, which the caller's next step
// reports), and the pod is then someone else's to handle. outcome is empty
// when nothing is to be counted (already reported, or waiting for ztunnel).
func (a *Adopter) Check(ctx context.Context, pod *corev1.Pod, d policy.Decision) (outcome string, handled bool, err error) {
	if a.open == nil {
		return "", false, nil
	}
	ambient := d.Spec.Mode == redirect.ModeAmbient
	a.mu.Lock()
	left := a.left[pod.UID]
	a.mu.Unlock()
	if left && !ambient && !a.cfg.Takeover {
		return "", true, nil // reported once; sidecar capture lasts the pod's life
	}
	path, err := late.FindNetns(a.cfg.HostProc, pod)
	if err != nil {
		return "", false, nil
	}
	ns, err := a.open(path)
	if err != nil {
		return "", false, nil
	}
	defer ns.Close()
	c, err := a.kernel.Detect(ns)
	if err != nil {
		// Unknown is not "uncaptured": never layer a second ruleset blind.
		return "", true, fmt.Errorf("read pod %s/%s's netns %s for istio-cni's capture: %w", pod.Namespace, pod.Name, path, err)
	}
	if !c.Found() {
		return "", false, nil
	}
	if !ambient && !a.cfg.Takeover {
		a.leave(pod, c)
		return OutcomeCaptured, true, nil
	}
	if ambient && a.cfg.ZtunnelReady != nil {
		if ok, why := a.cfg.ZtunnelReady(); !ok {
			a.deferAdoption(pod, why)
			return "", true, nil
		}
	}
	if err := a.takeOver(ctx, pod, d, path, c); err != nil {
		return "", true, err
	}
	if ambient && a.cfg.Mesh != nil {
		// Taken over with its rules and ztunnel's hold as istio-cni left
		// them: only the annotation is the mesh's to write.
		a.cfg.Mesh.Mark(ctx, policy.Pod{Namespace: pod.Namespace, Name: pod.Name, UID: string(pod.UID)}, "enabled")
	}
	a.mu.Lock()
	delete(a.left, pod.UID)
	a.mu.Unlock()
	a.event(pod, corev1.EventTypeNormal, events.ReasonIstioCNIAdopted, fmt.Sprintf(
		"sluice took over the traffic capture istio-cni programmed (%s): its own rules went in first, then Istio's were removed (%s)", c, d.Reason))
	return OutcomeAdopted, true, nil
}

// Forget drops what is kept about a deleted pod.
func (a *Adopter) Forget(pod *corev1.Pod) {
	a.mu.Lock()
	delete(a.left, pod.UID)
	a.mu.Unlock()
}

// deferAdoption leaves an ambient pod to istio-cni's rules until a ztunnel
// holds its snapshot (which lists the pod, so its proxy stays meanwhile):
// adopting it earlier would hand it to no ztunnel and fail.
func (a *Adopter) deferAdoption(pod *corev1.Pod, why string) {
	key := pod.Namespace + "/" + pod.Name
	a.mu.Lock()
	first := !a.deferred[key]
	a.deferred[key] = true
	a.mu.Unlock()
	if first {
		a.log.Info("ambient pod enrolled by istio-cni; adopting it once ztunnel is connected", "pod", key, "uid", pod.UID, "ztunnel", why)
	}
}

// deferredRecheck is how often ztunnel's readiness is looked at while pods
// wait for it.
const deferredRecheck = 500 * time.Millisecond

// RequeueDeferred hands the deferred pods' keys to requeue once ztunnel is
// ready, until ctx ends. It waits for a condition, not a failure: the
// pods are not tried, only ztunnel's readiness is read, until it holds.
func (a *Adopter) RequeueDeferred(ctx context.Context, requeue func(key string)) {
	if a.cfg.ZtunnelReady == nil {
		return
	}
	tick := time.NewTicker(deferredRecheck)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if ok, _ := a.cfg.ZtunnelReady(); !ok {
			continue
		}
		a.mu.Lock()
		keys := slices.Collect(maps.Keys(a.deferred))
		clear(a.deferred)
		a.mu.Unlock()
		for _, k := range keys {
			requeue(k)
		}
	}
}

func (a *Adopter) leave(pod *corev1.Pod, c Capture) {
	a.mu.Lock()
	a.left[pod.UID] = true
	a.mu.Unlock()
	a.log.Info("pod captured by istio-cni; leaving it to Istio (--istio-takeover is off)",
		"pod", pod.Namespace+"/"+pod.Name, "uid", pod.UID, "istio", c.String())
	a.event(pod, corev1.EventTypeNormal, events.ReasonIstioCNICaptured, fmt.Sprintf(
		"istio-cni captures this pod's traffic (%s); sluice leaves it as it is (--istio-takeover is off) and captures the pod when it is recreated", c))
}

// takeOver swaps Istio's capture for sluice's through the store, which
// journals the pod first, puts sluice's table in beside Istio's, hands an
// ambient pod to ztunnel (which held it for istio-cni), and only then
// removes Istio's rules. A failure at any step leaves the pod as Istio had
// it: its rules, none of sluice's, nothing journaled, and ztunnel still
// holding an ambient pod. ns is the handle Detect read; the store opens
// path again for itself.
func (a *Adopter) takeOver(ctx context.Context, pod *corev1.Pod, d policy.Decision, path string, c Capture) error {
	key := pod.Namespace + "/" + pod.Name
	err := a.cfg.Store.TakeOver(ctx, late.Record(pod, d, path), func(ns netns.NsHandle) error {
		if err := a.kernel.Remove(ns, c); err != nil {
			return fmt.Errorf("remove Istio's capture (%s): %w", c, err)
		}
		return nil
	})
	var rb workloads.RolledBack
	switch {
	case errors.As(err, &rb):
		return fmt.Errorf("take over pod %s from istio-cni: %w; sluice's table was taken back, Istio's capture is as it was", key, err)
	case err != nil:
		return fmt.Errorf("take over pod %s from istio-cni: %w", key, err)
	}
	a.log.Info("took over a pod from istio-cni", "pod", key, "uid", pod.UID, "istio", c.String(), "mode", d.Spec.Mode)
	return nil
}

// Failed reports a failed adoption, the attempt'th in a row; like a failed
// repair it is tried again on the pod's next update, and after wait.
func (a *Adopter) Failed(pod *corev1.Pod, err error, attempt int, wait time.Duration) {
	a.log.Error("handling a pod istio-cni captured failed", "pod", pod.Namespace+"/"+pod.Name, "uid", pod.UID, "attempt", attempt, "retry_in", wait, "err", err)
	a.event(pod, corev1.EventTypeWarning, events.ReasonCaptureRepairFailed,
		fmt.Sprintf("sluice could not take over the traffic capture istio-cni left on this pod; retried in %s or on the pod's next update: %v", wait, err))
}

func (a *Adopter) event(pod *corev1.Pod, eventType, reason, message string) {
	a.cfg.Events.Pod(pod.Namespace, pod.Name, pod.UID, eventType, reason, message)
}
