package ambientmesh

import (
	"fmt"
	"log/slog"
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/tools/cache"
)

// addrLearner is the store's side of learnProbeAddrs (workloads.Store).
type addrLearner interface {
	LearnAddrs(podUID string, ips []netip.Addr) error
}

// learnProbeAddrs feeds the pod addresses the API server reports to the
// store, for ambient pods enrolled before any address was known: their
// kubelet probes need the host probe table to know them. It acts only when
// a pod's status IPs appear or change, as Istio's node agent does.
func learnProbeAddrs(pods coreinformers.PodInformer, store addrLearner, log *slog.Logger) error {
	learn := func(pod *corev1.Pod) {
		ips := podStatusIPs(pod)
		if len(ips) == 0 {
			return
		}
		if err := store.LearnAddrs(string(pod.UID), ips); err != nil {
			log.Warn("adding an ambient pod's addresses to the host probe table", "pod", pod.Namespace+"/"+pod.Name, "err", err)
		}
	}
	_, err := pods.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if pod, ok := obj.(*corev1.Pod); ok {
				learn(pod)
			}
		},
		UpdateFunc: func(old, obj any) {
			o, ok1 := old.(*corev1.Pod)
			n, ok2 := obj.(*corev1.Pod)
			if ok1 && ok2 && !slices.Equal(podStatusIPs(o), podStatusIPs(n)) {
				learn(n)
			}
		},
	})
	if err != nil {
		return fmt.Errorf("pod handler for ambient probe addresses: %w", err)
	}
	return nil
}

// podStatusIPs are the addresses the pod's status lists.
func podStatusIPs(pod *corev1.Pod) []netip.Addr {
	var out []netip.Addr
	for _, p := range pod.Status.PodIPs {
		if a, err := netip.ParseAddr(p.IP); err == nil {
			out = append(out, a)
		}
	}
	return out
}
