package policy

import (
	"fmt"
	"math"
	"net/netip"
	"strconv"

	corev1 "k8s.io/api/core/v1"

	"github.com/sluicemesh/sluice/daemon/redirect"
)

// Names istio-cni keys on when it decides whether a pod is a sidecar pod.
const (
	annSidecarStatus = "sidecar.istio.io/status" // written by the injector
	annSidecarInject = "sidecar.istio.io/inject" // also a label, which wins
	containerProxy   = "istio-proxy"
	containerInit    = "istio-init"
	// The namespace or pod label that enrols pods in Istio's ambient mesh.
	labelDataplaneMode = "istio.io/dataplane-mode"
	envDNSCapture      = "ISTIO_META_DNS_CAPTURE"
	envDisableEnvoy    = "DISABLE_ENVOY"
	envInvalidDrop     = "INVALID_DROP"
)

// decideSidecar is the decision for a pod as the API server knows it; ns is
// its namespace, nil when unknown. It follows istio-cni's checks: every one
// of them must pass for the pod to be captured, so their order only decides
// which reason a passed-through pod reports. Pure, so it is tested without
// an API server.
func decideSidecar(pod *corev1.Pod, ns *corev1.Namespace, base redirect.Spec, ips []netip.Addr) (Decision, error) {
	skip := func(why string) (Decision, error) { return Decision{Reason: why}, nil }
	if pod.Spec.HostNetwork {
		return skip("host-network pod: it shares the node's network namespace")
	}
	if injectDisabled(pod) {
		return skip(annSidecarInject + " is false")
	}
	if _, ok := pod.Annotations[annSidecarStatus]; !ok {
		if mode := dataplaneMode(pod, ns); mode == "ambient" {
			return skip("ambient pod (" + labelDataplaneMode + "=ambient), and ambient is off (--ambient)")
		}
		return skip("not injected: no " + annSidecarStatus + " annotation")
	}
	proxy, initContainer := containers(pod)
	if initContainer {
		// The pod programs its own iptables; capturing it again would send
		// traffic through the proxy twice.
		return skip("has an " + containerInit + " container: capture is done inside the pod")
	}
	if proxy == nil {
		return skip("no " + containerProxy + " container")
	}
	if b, err := strconv.ParseBool(env(proxy, envDisableEnvoy)); err == nil && b {
		return skip(envDisableEnvoy + " is set on " + containerProxy)
	}
	// Gateways run "proxy router"; only sidecars are captured.
	if len(proxy.Args) >= 2 && proxy.Args[0] == "proxy" && proxy.Args[1] != "sidecar" {
		return skip(containerProxy + " runs as proxy type " + proxy.Args[1])
	}

	d := Decision{Inputs: []string{"annotation " + annSidecarStatus + ": present"}}
	// The families first: the annotations' ranges are kept per family.
	sidecarFamilies(&base, proxy, ips, &d)
	spec, err := SpecFromAnnotations(base, pod.Annotations)
	if err != nil {
		return Decision{}, err
	}
	for _, a := range trafficAnnotations {
		if v, ok := pod.Annotations[a]; ok {
			d.Inputs = append(d.Inputs, fmt.Sprintf("annotation %s: %q", a, v))
		}
	}
	if err := proxyIDs(&spec, proxy, &d); err != nil {
		return Decision{}, err
	}
	proxyEnvFlags(&spec, proxy, &d)
	if err := spec.Validate(); err != nil {
		return Decision{}, err
	}
	d.Capture, d.Spec, d.Reason = true, spec, "istio sidecar"
	return d, nil
}

// proxyEnvFlags reads istio-proxy's boolean env vars as istio-cni does: a
// value that does not parse is logged and counts as false.
func proxyEnvFlags(spec *redirect.Spec, proxy *corev1.Container, d *Decision) {
	for _, e := range []struct {
		name string
		dst  *bool
	}{{envDNSCapture, &spec.CaptureDNS}, {envInvalidDrop, &spec.DropInvalid}} {
		v, ok := envOK(proxy, e.name)
		if !ok {
			continue
		}
		b, err := strconv.ParseBool(v)
		if err != nil {
			d.warn(fmt.Sprintf("env %s: %q ignored: not a boolean", e.name, v))
		} else {
			d.Inputs = append(d.Inputs, fmt.Sprintf("env %s: %q", e.name, v))
		}
		*e.dst = b
	}
}

// proxyIDs are istio-proxy's runAsUser and runAsGroup. istio-cni treats an
// unset or zero id as the default 1337, each on its own: the proxy never
// runs as root, and matching uid 0 would exempt every root process in the
// pod from capture.
func proxyIDs(spec *redirect.Spec, proxy *corev1.Container, d *Decision) error {
	sc := proxy.SecurityContext
	if sc == nil {
		return nil
	}
	for _, id := range []struct {
		field string
		v     *int64
		dst   *uint32
	}{{"runAsUser", sc.RunAsUser, &spec.ProxyUID}, {"runAsGroup", sc.RunAsGroup, &spec.ProxyGID}} {
		if id.v == nil || *id.v == 0 {
			continue
		}
		if *id.v < 0 || *id.v > math.MaxUint32 {
			return fmt.Errorf("container %s securityContext.%s %d is not a valid id", containerProxy, id.field, *id.v)
		}
		*id.dst = uint32(*id.v)
		d.Inputs = append(d.Inputs, fmt.Sprintf("container %s %s: %d", containerProxy, id.field, *id.v))
	}
	return nil
}

// injectDisabled is istio-cni's opt-out: the label, when present, wins over
// the annotation; a value that is not a boolean opts nothing out.
func injectDisabled(pod *corev1.Pod) bool {
	v := pod.Annotations[annSidecarInject]
	if l, ok := pod.Labels[annSidecarInject]; ok {
		v = l
	}
	b, err := strconv.ParseBool(v)
	return err == nil && !b
}

// dataplaneMode is the pod's ambient enrolment label, else its namespace's.
func dataplaneMode(pod *corev1.Pod, ns *corev1.Namespace) string {
	if v, ok := pod.Labels[labelDataplaneMode]; ok {
		return v
	}
	if ns != nil {
		return ns.Labels[labelDataplaneMode]
	}
	return ""
}

// containers finds the proxy (a regular container, or a native sidecar
// init container on Kubernetes 1.28+) and whether istio-init is present.
func containers(pod *corev1.Pod) (proxy *corev1.Container, initContainer bool) {
	all := make([]*corev1.Container, 0, len(pod.Spec.InitContainers)+len(pod.Spec.Containers))
	for i := range pod.Spec.InitContainers {
		all = append(all, &pod.Spec.InitContainers[i])
	}
	for i := range pod.Spec.Containers {
		all = append(all, &pod.Spec.Containers[i])
	}
	for _, c := range all {
		switch c.Name {
		case containerProxy:
			proxy = c
		case containerInit:
			initContainer = true
		}
	}
	return proxy, initContainer
}

// env is a literal env var of c; values from ConfigMaps or Secrets are not
// resolved, as istio-cni does not resolve them either.
func env(c *corev1.Container, name string) string {
	v, _ := envOK(c, name)
	return v
}

// envOK is env, and whether c sets name at all (istio-cni tells an empty
// value from an absent one). The last entry wins, as in the container.
func envOK(c *corev1.Container, name string) (string, bool) {
	v, found := "", false
	for _, e := range c.Env {
		if e.Name == name {
			v, found = e.Value, true
		}
	}
	return v, found
}
