package policy

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/sluicemesh/sluice/daemon/redirect"
)

// Rules is the Kubernetes policy's decision for a pod as the API server
// holds it, with no API server: pure, so it is tested, and compared with
// Istio's own code (test/istio), without one.
type Rules struct {
	// Sidecar is the capture a sidecar pod gets before its annotations
	// apply (redirect.DefaultSpec).
	Sidecar redirect.Spec
	// Ambient, when set, enrols ambient pods; nil passes them through.
	Ambient *AmbientConfig
}

// Decide decides for pod in namespace ns (nil when unknown). ips are the
// pod's addresses as the runtime reported them; empty, the pod's status
// is read instead.
func (r Rules) Decide(pod *corev1.Pod, ns *corev1.Namespace, ips []netip.Addr) (Decision, error) {
	var d Decision
	var err error
	if r.Ambient != nil && isAmbient(pod, ns, *r.Ambient) {
		d, err = decideAmbient(pod, *r.Ambient)
	} else {
		if len(ips) == 0 {
			ips = statusIPs(pod)
		}
		d, err = decideSidecar(pod, ns, r.Sidecar, ips)
	}
	d.ServiceAccount = pod.Spec.ServiceAccountName
	return d, err
}

const envDualStack = "ISTIO_DUAL_STACK"

// sidecarFamilies is istio-iptables' rule for IPv6 (its
// ENABLE_INBOUND_IPV6, from the pod's addresses): IPv4 rules always, IPv6
// rules when the pod's primary address is IPv6 (the kernel lists IPv4
// addresses first, so: when it has no IPv4 address), or when
// ISTIO_DUAL_STACK on istio-proxy is true and it has any IPv6 address.
// Without any address known both families are captured: a connection the
// proxy does not listen for is refused, never let past it.
func sidecarFamilies(spec *redirect.Spec, proxy *corev1.Container, ips []netip.Addr, d *Decision) {
	dualStack := false
	if v, ok := envOK(proxy, envDualStack); ok {
		b, err := strconv.ParseBool(v)
		if err != nil {
			d.warn(fmt.Sprintf("env %s: %q ignored: not a boolean", envDualStack, v))
		} else {
			dualStack = b
			d.Inputs = append(d.Inputs, fmt.Sprintf("env %s: %q", envDualStack, v))
		}
	}
	var v4, v6 bool
	for _, ip := range ips {
		ip = ip.Unmap()
		if !ip.IsValid() || ip.IsLoopback() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() {
			continue
		}
		v4, v6 = v4 || ip.Is4(), v6 || ip.Is6()
	}
	if !spec.IPv4 {
		return // an IPv6-only node: nothing to choose
	}
	if !v4 && !v6 {
		d.Inputs = append(d.Inputs, "pod IPs: none known, both families captured")
		return
	}
	d.Inputs = append(d.Inputs, fmt.Sprintf("pod IPs: %v", ips))
	spec.IPv6 = spec.IPv6 && v6 && (dualStack || !v4)
}

// statusIPs are the pod's addresses as its status has them.
func statusIPs(pod *corev1.Pod) []netip.Addr {
	var out []netip.Addr
	for _, p := range pod.Status.PodIPs {
		if a, err := netip.ParseAddr(p.IP); err == nil {
			out = append(out, a)
		}
	}
	if a, err := netip.ParseAddr(pod.Status.PodIP); err == nil && len(out) == 0 {
		out = append(out, a)
	}
	return out
}

// OwnPods names the agent's own pods: those in Namespace whose name starts
// with NamePrefix. The zero value names none.
type OwnPods struct {
	Namespace  string
	NamePrefix string
}

// Match says whether p is one of the agent's own pods.
func (o OwnPods) Match(p Pod) bool {
	return o.NamePrefix != "" && p.Namespace == o.Namespace && strings.HasPrefix(p.Name, o.NamePrefix)
}

// AgentPodPrefix is the name prefix of the pods of the DaemonSet whose pod
// is podName: the name less its random suffix ("sluice-agent-x7k2p" gives
// "sluice-agent-"). "" when podName has no suffix to drop.
func AgentPodPrefix(podName string) string {
	i := strings.LastIndexByte(podName, '-')
	if i <= 0 {
		return ""
	}
	return podName[:i+1]
}
