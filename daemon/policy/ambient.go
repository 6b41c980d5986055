package policy

import (
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/sluicemesh/sluice/daemon/kubecache"
	"github.com/sluicemesh/sluice/daemon/redirect"
)

// Per-pod ambient options, as istio-cni's node agent reads them.
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
	// Selectors decide which pods are ambient; nil is Istio's chart
	// default (DefaultEnablementSelectors).
	Selectors *Selectors
}

var defaultSelectors = MustParseSelectors(DefaultEnablementSelectors)

func (c AmbientConfig) selectors() *Selectors {
	if c.Selectors == nil {
		return defaultSelectors
	}
	return c.Selectors
}

// isAmbient is Istio's enrolment rule, its enablement selectors over the
// pod's and its namespace's labels (ns nil: no namespace labels).
func isAmbient(pod *corev1.Pod, ns *corev1.Namespace, cfg AmbientConfig) bool {
	return cfg.selectors().Matches(pod, kubecache.NamespaceLabels(ns))
}

// decideAmbient is the decision for a pod isAmbient accepted. Like
// istio-cni, it never fails a pod over its options: a value that is not a
// boolean is ignored with a warning.
func decideAmbient(pod *corev1.Pod, cfg AmbientConfig) (Decision, error) {
	spec := cfg.Base
	spec.CaptureDNS = cfg.DNSCapture
	d := Decision{Inputs: []string{"enablement selectors: matched", fmt.Sprintf("--ambient-dns-capture: %v", cfg.DNSCapture)}}
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
			d.warn(fmt.Sprintf("annotation %s=%q ignored: not a boolean", opt.ann, v))
			continue
		}
		*opt.dst = b
		d.Inputs = append(d.Inputs, fmt.Sprintf("annotation %s: %q", opt.ann, v))
	}
	// Ambient reads only the current spelling, split on commas with
	// blanks dropped; the deprecated kubevirtInterfaces is sidecar-only.
	if v, ok := pod.Annotations[annRerouteInterfaces]; ok {
		spec.RerouteInterfaces = nil
		for _, name := range strings.Split(v, ",") {
			if name = strings.TrimSpace(name); name != "" {
				spec.RerouteInterfaces = append(spec.RerouteInterfaces, name)
			}
		}
		if err := checkInterfaceNames(spec.RerouteInterfaces); err != nil {
			return Decision{}, &AnnotationError{annRerouteInterfaces, v, err}
		}
		d.Inputs = append(d.Inputs, fmt.Sprintf("annotation %s: %q", annRerouteInterfaces, v))
	}
	if err := spec.Validate(); err != nil {
		return Decision{}, err
	}
	d.Capture, d.Spec, d.Reason = true, spec, "istio ambient"
	return d, nil
}
