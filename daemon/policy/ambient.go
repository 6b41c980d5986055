package policy

import (
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"

	"github.com/sluicemesh/sluice/daemon/redirect"
)

// Per-pod ambient options, as istio-cni reads them.
const (
	annAmbientDNSCapture    = "ambient.istio.io/dns-capture"
	annAmbientBypassInbound = "ambient.istio.io/bypass-inbound-capture"
)

// AmbientConfig turns on ambient enrolment.
type AmbientConfig struct {
	// Base is the in-pod capture every ambient pod gets
	// (redirect.DefaultAmbientSpec, with the node's IP families).
	Base redirect.Spec
	// DNSCapture is the node-wide default; a pod's annotation wins.
	DNSCapture bool
}

// isAmbient is Istio's enrolment rule: the pod's or else its namespace's
// istio.io/dataplane-mode=ambient, unless the pod opts out with "none",
// carries a sidecar, or shares the node's network.
func isAmbient(pod *corev1.Pod, ns *corev1.Namespace) bool {
	if pod.Spec.HostNetwork {
		return false
	}
	if _, sidecar := pod.Annotations[annSidecarStatus]; sidecar {
		return false
	}
	return dataplaneMode(pod, ns) == "ambient"
}

// decideAmbient is the decision for a pod isAmbient accepted.
func decideAmbient(pod *corev1.Pod, cfg AmbientConfig) (Decision, error) {
	spec := cfg.Base
	spec.CaptureDNS = cfg.DNSCapture
	inputs := []string{labelDataplaneMode + ": ambient", fmt.Sprintf("--ambient-dns-capture: %v", cfg.DNSCapture)}
	for _, opt := range []struct {
		ann string
		dst *bool
	}{{annAmbientDNSCapture, &spec.CaptureDNS}, {annAmbientBypassInbound, &spec.BypassInboundCapture}} {
		v, ok := pod.Annotations[opt.ann]
		if !ok {
			continue
		}
		b, err := strconv.ParseBool(v)
		if err != nil {
			return Decision{}, &AnnotationError{opt.ann, v, fmt.Errorf("not a boolean")}
		}
		*opt.dst = b
		inputs = append(inputs, fmt.Sprintf("annotation %s: %q", opt.ann, v))
	}
	if err := spec.Validate(); err != nil {
		return Decision{}, err
	}
	return Decision{Capture: true, Spec: spec, Reason: "istio ambient", Inputs: inputs}, nil
}
