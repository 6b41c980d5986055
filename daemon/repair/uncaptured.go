package repair

import (
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
)

// LabelUncaptured marks a pod found running without capture
// (--repair-mode=label), for an operator or a controller to act on.
const LabelUncaptured = "sluice.dev/uncaptured"

// latePrefix starts the container id of a late enrollment. The runtime's
// sandbox id is unknown to the agent, so the record gets its own, valid
// under the CNI rules (alphanumerics, '-'), that no runtime id collides
// with: those are hex.
const latePrefix = "late-"

// LateContainerID is the container id a late enrollment is journaled
// under.
func LateContainerID(podUID string) string { return latePrefix + podUID }

// settled reports whether the pod is past its CNI ADD and alive: its
// sandbox has an IP (the kubelet writes it only after the runtime's network
// setup returned), it is not terminating, and it is not a host-network pod,
// which has no netns of its own to capture.
func settled(pod *corev1.Pod) bool {
	switch {
	case pod.Spec.HostNetwork:
		return false
	case pod.DeletionTimestamp != nil:
		return false
	case pod.Status.Phase != corev1.PodRunning && pod.Status.Phase != corev1.PodPending:
		return false
	}
	return len(podIPs(pod)) > 0
}

// podIPs are the pod's addresses from its status; unparsable ones are
// skipped.
func podIPs(pod *corev1.Pod) []netip.Addr {
	var out []netip.Addr
	add := func(s string) {
		if a, err := netip.ParseAddr(s); err == nil && !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	for _, ip := range pod.Status.PodIPs {
		add(ip.IP)
	}
	add(pod.Status.PodIP)
	return out
}

// hostPrefixes writes IPs the way the journal holds them (CIDR, as CNI
// results give them); a pod's status has no prefix length, so each is a
// host route.
func hostPrefixes(ips []netip.Addr) []netip.Prefix {
	out := make([]netip.Prefix, 0, len(ips))
	for _, a := range ips {
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out
}
