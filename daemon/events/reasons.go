package events

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sluicemesh/sluice/daemon/policy"
)

// The reasons the agent records, one per thing it did or failed to do.
// They are API: operators filter on them (kubectl get events
// --field-selector reason=CaptureFailed), so they never change.
const (
	// A pod's CNI ADD failed in the agent: the pod does not start.
	ReasonCaptureFailed = "CaptureFailed"
	// A pod's rules had drifted in the kernel and were re-applied.
	ReasonRulesetRepaired = "RulesetRepaired"
	// A pod found running uncaptured had its rules programmed late.
	ReasonCaptureRepaired = "CaptureRepaired"
	// A pod found running uncaptured was labelled sluice.dev/uncaptured.
	ReasonUncaptured = "Uncaptured"
	// A pod found running uncaptured was deleted, to be recreated.
	ReasonUncapturedDeleted = "UncapturedDeleted"
	// Repairing an uncaptured pod failed.
	ReasonCaptureRepairFailed = "CaptureRepairFailed"
	// A pod istio-cni captured was left to Istio (--istio-takeover off).
	ReasonIstioCNICaptured = "IstioCNICaptured"
	// A pod istio-cni captured was taken over: sluice's rules replaced Istio's.
	ReasonIstioCNIAdopted = "IstioCNIAdopted"
)

// CaptureFailed records that the agent could not set up capture for a pod
// during its CNI ADD. The runtime's own error reaches the kubelet; this one
// lands on the pod, where its owner looks.
func (r *Recorder) CaptureFailed(pod policy.Pod, err error) {
	if !named(pod) {
		return
	}
	r.Pod(pod.Namespace, pod.Name, types.UID(pod.UID), corev1.EventTypeWarning, ReasonCaptureFailed,
		fmt.Sprintf("sluice could not set up traffic capture; the pod's sandbox will not start until it can: %v", err))
}

// RulesetRepaired records that the pod's capture rules had drifted from
// what the agent programmed (drift says how) and were re-applied.
func (r *Recorder) RulesetRepaired(pod policy.Pod, drift []string) {
	if !named(pod) {
		return
	}
	r.Pod(pod.Namespace, pod.Name, types.UID(pod.UID), corev1.EventTypeNormal, ReasonRulesetRepaired,
		"traffic capture rules had drifted and were re-applied: "+strings.Join(drift, "; "))
}

// named reports whether pod names a Kubernetes pod: cnitool and the demo
// call without one, and an Event needs an object.
func named(pod policy.Pod) bool { return pod.Namespace != "" && pod.Name != "" }
