package events

import (
	"log/slog"
	"maps"
	"strings"
	"sync"

	"github.com/sluicemesh/sluice/daemon/policy"
)

// The reasons a pod is passed through, as the bounded label of
// sluice_pods_passed_through_total; the log line carries the full text.
const (
	PassExcludedNamespace = "excluded-namespace"
	PassHostNetwork       = "host-network"
	PassInjectDisabled    = "inject-disabled"
	PassAmbientOff        = "ambient-off"
	PassNotInjected       = "not-injected"
	PassIstioInit         = "istio-init"
	PassNoProxy           = "no-proxy"
	PassEnvoyDisabled     = "envoy-disabled"
	PassNotSidecar        = "not-sidecar"
	PassOther             = "other"
)

// PassReasons is every value of the reason label, so each is exported
// at 0 before it first happens.
var PassReasons = []string{PassExcludedNamespace, PassHostNetwork, PassInjectDisabled, PassAmbientOff,
	PassNotInjected, PassIstioInit, PassNoProxy, PassEnvoyDisabled, PassNotSidecar, PassOther}

// passMarks map a policy reason's text to its label, first match wins. The
// policy's reasons are prose for people; this keeps the metric bounded.
var passMarks = []struct{ substr, reason string }{
	{" is excluded", PassExcludedNamespace},
	{"host-network", PassHostNetwork},
	{"istio-init", PassIstioInit},
	{"ambient is off", PassAmbientOff},
	{"inject is false", PassInjectDisabled},
	{"not injected", PassNotInjected},
	{"DISABLE_ENVOY", PassEnvoyDisabled},
	{"runs as proxy type", PassNotSidecar},
	{"container", PassNoProxy}, // "no istio-proxy container"
}

// PassReason is the label for a policy's pass-through reason.
func PassReason(reason string) string {
	for _, m := range passMarks {
		if strings.Contains(reason, m.substr) {
			return m.reason
		}
	}
	return PassOther
}

// IstioInitMessage is logged once per pod that istiod injected with
// istio-init: istiod is not in CNI mode, so the pod captures itself and
// sluice leaves it alone. docs/migrate-from-istio-cni.md tells people to
// grep for it.
const IstioInitMessage = "pod has istio-init injected: istiod is not configured for CNI mode, so sluice leaves the pod's capture to istio-init"

// seenCap bounds the once-per-pod memory; past it the set starts over and
// a pod may be logged twice, which is harmless.
const seenCap = 4096

// Decisions logs the outcome of every ADD, the line that answers "why was
// (or wasn't) my pod captured?", and counts pods passed through by reason.
type Decisions struct {
	log *slog.Logger

	mu       sync.Mutex
	passed   map[string]int
	initSeen map[string]struct{}
	initPods int
}

// NewDecisions logs to log.
func NewDecisions(log *slog.Logger) *Decisions {
	passed := make(map[string]int, len(PassReasons))
	for _, r := range PassReasons {
		passed[r] = 0
	}
	return &Decisions{log: log, passed: passed, initSeen: map[string]struct{}{}}
}

// Added records one ADD: enrolled in mode, passed through (d.Capture
// false), or failed (err). requestID joins the line to the plugin's log
// and to the error the runtime reports.
func (d *Decisions) Added(pod policy.Pod, containerID, requestID string, dec policy.Decision, err error) {
	if d == nil {
		return
	}
	attrs := []any{"pod", pod.Namespace + "/" + pod.Name, "container_id", containerID, "request_id", requestID}
	switch {
	case err != nil:
		d.log.Warn("pod not started: capture could not be set up", append(attrs, "err", err)...)
	case dec.Capture:
		d.log.Info("pod enrolled", append(attrs, "mode", string(dec.Spec.Mode), "reason", dec.Reason)...)
		d.log.Debug("policy inputs", append(attrs, "inputs", dec.Inputs)...)
	default:
		reason := PassReason(dec.Reason)
		d.log.Info("pod passed through", append(attrs, "reason", dec.Reason, "reason_code", reason)...)
		d.mu.Lock()
		d.passed[reason]++
		d.mu.Unlock()
		if reason == PassIstioInit {
			d.istioInit(pod, attrs)
		}
	}
}

// istioInit warns once per pod: every one of them is a sign that istiod
// still injects istio-init, which a migration to sluice must turn off.
func (d *Decisions) istioInit(pod policy.Pod, attrs []any) {
	key := pod.UID
	if key == "" {
		key = pod.Namespace + "/" + pod.Name
	}
	d.mu.Lock()
	_, seen := d.initSeen[key]
	if !seen {
		if len(d.initSeen) >= seenCap {
			clear(d.initSeen)
		}
		d.initSeen[key] = struct{}{}
		d.initPods++
	}
	d.mu.Unlock()
	if !seen {
		d.log.Warn(IstioInitMessage, append(attrs, "docs", "docs/migrate-from-istio-cni.md")...)
	}
}

// PassedThrough counts pods passed through since start, by reason label;
// every label is present.
func (d *Decisions) PassedThrough() map[string]int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return maps.Clone(d.passed)
}

// IstioInitPods counts pods seen with istio-init injected, once each.
func (d *Decisions) IstioInitPods() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.initPods
}
