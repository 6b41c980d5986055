package repair

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/vishvananda/netns"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/util/workqueue"

	"github.com/sluicemesh/sluice/daemon/events"
	"github.com/sluicemesh/sluice/daemon/istioadopt"
	"github.com/sluicemesh/sluice/daemon/podns"
	"github.com/sluicemesh/sluice/daemon/policy"
	"github.com/sluicemesh/sluice/daemon/redirect"
	"github.com/sluicemesh/sluice/daemon/workloads"
)

// The outcomes of a pod istio-cni captured, counted beside the repairs.
const (
	// Left to Istio: --istio-takeover is off and the pod is a sidecar pod.
	OutcomeIstioCaptured = "istio-captured"
	// Taken over: sluice's table in, Istio's out, the pod journaled.
	OutcomeIstioAdopted = "istio-adopted"
)

// IstioCNI reads and removes istio-cni's capture in a netns: istioadopt's
// kernel functions, or a wrapper in tests that need a removal to fail.
type IstioCNI interface {
	Detect(ns netns.NsHandle) (istioadopt.Capture, error)
	Remove(ns netns.NsHandle, c istioadopt.Capture) error
}

type istioKernel struct{}

func (istioKernel) Detect(ns netns.NsHandle) (istioadopt.Capture, error) {
	return istioadopt.Detect(ns)
}
func (istioKernel) Remove(ns netns.NsHandle, c istioadopt.Capture) error {
	return istioadopt.Remove(ns, c)
}

// A pod with no sluice record that istio-cni captured is not uncaptured:
// its proxy already gets its traffic. Layering sluice's table on it would
// capture it twice, so before any repair the pod's netns is read for
// Istio's rules. A sidecar pod is left to Istio unless --istio-takeover;
// an ambient pod is always adopted, as ztunnel holds it only while this
// agent lists it (pending.go).

// istioHandled reports whether the pod was istio-cni's and has been dealt
// with here (left, adopted, or failed and recorded).
func (r *Repairer) istioHandled(ctx context.Context, pod *corev1.Pod, d policy.Decision) bool {
	outcome, handled, err := r.istio(ctx, pod, d)
	switch {
	case !handled:
		return false
	case err != nil:
		r.adoptFailed(pod, err)
	case outcome != "":
		r.succeeded(pod, outcome)
	}
	return true
}

// istio handles the pod if istio-cni captures it; handled is false when
// it does not (or its netns cannot be found, which the repair reports).
func (r *Repairer) istio(ctx context.Context, pod *corev1.Pod, d policy.Decision) (outcome string, handled bool, err error) {
	if r.opener == nil {
		return "", false, nil
	}
	ambient := d.Spec.Mode == redirect.ModeAmbient
	r.mu.Lock()
	left := r.istioLeft[pod.UID]
	r.mu.Unlock()
	if left && !ambient && !r.cfg.IstioTakeover {
		return "", true, nil // reported once; sidecar capture lasts the pod's life
	}
	path, err := podns.FindPodNetns(r.cfg.HostProc, string(pod.UID), podIPs(pod))
	if err != nil {
		return "", false, nil
	}
	ns, err := r.opener.Open(path)
	if err != nil {
		return "", false, nil
	}
	defer ns.Close()
	c, err := r.istioCNI.Detect(ns)
	if err != nil {
		// Unknown is not "uncaptured": never layer a second ruleset blind.
		return "", true, fmt.Errorf("read pod %s/%s's netns %s for istio-cni's capture: %w", pod.Namespace, pod.Name, path, err)
	}
	if !c.Found() {
		return "", false, nil
	}
	if !ambient && !r.cfg.IstioTakeover {
		r.leaveToIstio(pod, c)
		return OutcomeIstioCaptured, true, nil
	}
	if ambient && r.cfg.ZtunnelReady != nil {
		if ok, why := r.cfg.ZtunnelReady(); !ok {
			r.deferAdoption(pod, why)
			return "", true, nil
		}
	}
	if err := r.takeOver(ctx, pod, d, path, c); err != nil {
		return "", true, err
	}
	if ambient {
		r.annotate(ctx, pod, "enabled")
	}
	r.mu.Lock()
	delete(r.istioLeft, pod.UID)
	r.mu.Unlock()
	r.event(pod, corev1.EventTypeNormal, events.ReasonIstioCNIAdopted, fmt.Sprintf(
		"sluice took over the traffic capture istio-cni programmed (%s): its own rules went in first, then Istio's were removed (%s)", c, d.Reason))
	return OutcomeIstioAdopted, true, nil
}

// deferAdoption leaves an ambient pod to istio-cni's rules until a ztunnel
// holds its snapshot (which lists the pod, so its proxy stays meanwhile):
// adopting it earlier would hand it to no ztunnel and fail.
func (r *Repairer) deferAdoption(pod *corev1.Pod, why string) {
	key := pod.Namespace + "/" + pod.Name
	r.mu.Lock()
	first := !r.deferred[key]
	r.deferred[key] = true
	r.mu.Unlock()
	if first {
		r.log.Info("ambient pod enrolled by istio-cni; adopting it once ztunnel is connected", "pod", key, "uid", pod.UID, "ztunnel", why)
	}
}

// requeueDeferred re-checks deferred pods once ztunnel is ready, until ctx
// ends.
func (r *Repairer) requeueDeferred(ctx context.Context, q workqueue.TypedInterface[string]) {
	if r.cfg.ZtunnelReady == nil {
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
		if ok, _ := r.cfg.ZtunnelReady(); !ok {
			continue
		}
		r.mu.Lock()
		keys := slices.Collect(maps.Keys(r.deferred))
		clear(r.deferred)
		r.mu.Unlock()
		for _, k := range keys {
			q.Add(k)
		}
	}
}

// deferredRecheck is how often pods waiting for ztunnel are looked at.
const deferredRecheck = 500 * time.Millisecond

func (r *Repairer) leaveToIstio(pod *corev1.Pod, c istioadopt.Capture) {
	r.mu.Lock()
	r.istioLeft[pod.UID] = true
	r.mu.Unlock()
	r.log.Info("pod captured by istio-cni; leaving it to Istio (--istio-takeover is off)",
		"pod", pod.Namespace+"/"+pod.Name, "uid", pod.UID, "istio", c.String())
	r.event(pod, corev1.EventTypeNormal, events.ReasonIstioCNICaptured, fmt.Sprintf(
		"istio-cni captures this pod's traffic (%s); sluice leaves it as it is (--istio-takeover is off) and captures the pod when it is recreated", c))
}

// takeOver swaps Istio's capture for sluice's through the store, which
// journals the pod first, puts sluice's table in beside Istio's, hands an
// ambient pod to ztunnel (which held it for istio-cni), and only then
// removes Istio's rules. A failure at any step leaves the pod as Istio had
// it: its rules, none of sluice's, nothing journaled, and ztunnel still
// holding an ambient pod. ns is the handle Detect read; the store opens
// path again for itself.
func (r *Repairer) takeOver(ctx context.Context, pod *corev1.Pod, d policy.Decision, path string, c istioadopt.Capture) error {
	key := pod.Namespace + "/" + pod.Name
	err := r.cfg.Store.TakeOver(ctx, r.lateRecord(pod, d, path), func(ns netns.NsHandle) error {
		if err := r.istioCNI.Remove(ns, c); err != nil {
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
	r.log.Info("took over a pod from istio-cni", "pod", key, "uid", pod.UID, "istio", c.String(), "mode", d.Spec.Mode)
	return nil
}

// adoptFailed records a failed adoption; like a failed repair it is tried
// again on the pod's next update, and by the retry timer after a backoff.
func (r *Repairer) adoptFailed(pod *corev1.Pod, err error) {
	n, wait := r.noteFailure(pod)
	r.log.Error("handling a pod istio-cni captured failed", "pod", pod.Namespace+"/"+pod.Name, "uid", pod.UID, "attempt", n, "retry_in", wait, "err", err)
	r.event(pod, corev1.EventTypeWarning, events.ReasonCaptureRepairFailed,
		fmt.Sprintf("sluice could not take over the traffic capture istio-cni left on this pod; retried in %s or on the pod's next update: %v", wait, err))
}
