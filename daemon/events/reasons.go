package events

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// The reasons the agent records, one per thing it did or failed to do;
// every reason it emits is listed here. They are API: operators filter on
// them (kubectl get events --field-selector reason=CaptureFailed), so once
// released they never change.
const (
	// A pod's CNI ADD failed in the agent: the pod does not start.
	ReasonCaptureFailed = "CaptureFailed"
	// A pod's rules had drifted in the kernel and were reasserted.
	ReasonRulesetReasserted = "RulesetReasserted"
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
	// A running pod joined the ambient mesh after a label change.
	ReasonAmbientEnrolled = "AmbientEnrolled"
	// A running pod left the ambient mesh after a label change.
	ReasonAmbientUnenrolled = "AmbientUnenrolled"
)

// PodRef names the pod an Event is about. It is this package's own, so
// recording an Event needs neither policy nor anything below it.
type PodRef struct {
	Namespace string
	Name      string
	UID       string
}

// CaptureFailed records that the agent could not set up capture for a pod
// during its CNI ADD. The runtime's own error reaches the kubelet; this one
// lands on the pod, where its owner looks.
func (r *Recorder) CaptureFailed(pod PodRef, err error) {
	if !named(pod) {
		return
	}
	r.Pod(pod.Namespace, pod.Name, types.UID(pod.UID), corev1.EventTypeWarning, ReasonCaptureFailed,
		fmt.Sprintf("sluice could not set up traffic capture; the pod's sandbox will not start until it can: %v", err))
}

// RulesetReasserted records that the pod's capture rules had drifted from
// what the agent programmed (drift says how) and were re-applied.
func (r *Recorder) RulesetReasserted(pod PodRef, drift []string) {
	if !named(pod) {
		return
	}
	r.Pod(pod.Namespace, pod.Name, types.UID(pod.UID), corev1.EventTypeNormal, ReasonRulesetReasserted,
		"traffic capture rules had drifted and were re-applied: "+strings.Join(drift, "; "))
}

// named reports whether pod names a Kubernetes pod: cnitool and the demo
// call without one, and an Event needs an object.
func named(pod PodRef) bool { return pod.Namespace != "" && pod.Name != "" }
