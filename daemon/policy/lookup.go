package policy

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ErrPodNotFound is returned when neither the cache nor the API server
// knows the pod the runtime asked about.
var ErrPodNotFound = errors.New("pod not found")

// lookup finds the pod the runtime is setting up. The cache usually has it:
// the kubelet runs the CNI ADD after it has seen the pod, and so has our
// watch. When it does not (our watch is behind, or the pod was recreated
// under the same name and the cache still holds the old one), lookup waits
// up to LookupWait for the watch to deliver it, then asks the API server
// once, so a slow watch costs a second and not the pod.
func (k *Kube) lookup(ctx context.Context, p Pod) (*corev1.Pod, error) {
	key := p.Namespace + "/" + p.Name
	wait, cancel := context.WithTimeout(ctx, k.cfg.LookupWait)
	pod, ok := k.waitCached(wait, p)
	cancel()
	if ok {
		return pod, nil
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("look up pod %s on node %s: %w", key, k.cfg.NodeName, err)
	}

	pod, err := k.cfg.Client.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil, fmt.Errorf("pod %s (uid %q) on node %s: not in the cache after %v, and the API server does not have it: %w",
			key, p.UID, k.cfg.NodeName, k.cfg.LookupWait, ErrPodNotFound)
	case err != nil:
		return nil, fmt.Errorf("pod %s on node %s: not in the cache after %v, and getting it from the API server failed: %w",
			key, k.cfg.NodeName, k.cfg.LookupWait, err)
	case p.UID != "" && string(pod.UID) != p.UID:
		// The name now belongs to a newer pod; the sandbox being set up
		// is for one that no longer exists.
		return nil, fmt.Errorf("pod %s on node %s: the runtime's uid %s is not the API server's %s: %w",
			key, k.cfg.NodeName, p.UID, pod.UID, ErrPodNotFound)
	}
	k.log.Info("pod found by direct get; the cache was behind", "pod", key, "uid", pod.UID)
	return pod, nil
}

// waitCached returns the pod once the cache has it, or false when ctx ends
// first. It sleeps on the informer's events, never on a timer.
func (k *Kube) waitCached(ctx context.Context, p Pod) (*corev1.Pod, bool) {
	for {
		arrived, forget := k.arrivals.watch(p.Namespace + "/" + p.Name)
		if pod, ok := k.cached(p); ok {
			forget()
			return pod, true
		}
		select {
		case <-arrived:
			forget()
		case <-ctx.Done():
			forget()
			return nil, false
		}
	}
}

// cached is the pod from the informer cache when its UID matches what the
// runtime says (or the runtime gave none, as cnitool does).
func (k *Kube) cached(p Pod) (*corev1.Pod, bool) {
	pod, err := k.pods.Pods(p.Namespace).Get(p.Name)
	if err != nil {
		return nil, false
	}
	if p.UID != "" && string(pod.UID) != p.UID {
		return nil, false
	}
	return pod, true
}
