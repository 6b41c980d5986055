package events

import (
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
	// Another netns was mounted at a pod's netns path; nothing was
	// written to it.
	ReasonNetnsReplaced = "NetnsReplaced"
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

// Sandbox is the pod sandbox a CNI ADD was for: its container id and netns
// path. Each retry of a failing pod is a new sandbox.
type Sandbox struct {
	ID    string
	Netns string
}

// CaptureFailed records that the agent could not set up capture for a pod
// during its CNI ADD. The runtime's own error reaches the kubelet; this one
// lands on the pod, where its owner looks. The sandbox's id and netns path
// are taken out of the message: the kubelet retries with a new sandbox
// every few seconds, and one cause must count up on one Event rather than
// pile up a new Event per retry.
func (r *Recorder) CaptureFailed(pod PodRef, sb Sandbox, err error) {
	if !named(pod) {
		return
	}
	r.Pod(pod.Namespace, pod.Name, types.UID(pod.UID), corev1.EventTypeWarning, ReasonCaptureFailed,
		"sluice could not set up traffic capture; the pod's sandbox will not start until it can: "+withoutSandbox(err.Error(), sb))
}

// withoutSandbox replaces sb's netns path and id in msg (the netns first:
// its path may hold the id).
func withoutSandbox(msg string, sb Sandbox) string {
	if sb.Netns != "" {
		msg = strings.ReplaceAll(msg, sb.Netns, "<netns>")
	}
	if sb.ID != "" {
		msg = strings.ReplaceAll(msg, sb.ID, "<sandbox>")
	}
	return msg
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

// NetnsReplaced records that path, the pod's netns path, names another
// network namespace than the one its capture was set up in. followed is
// where the pod's own netns is still verified, "" when nothing holds it
// any more and the agent let go of the pod. A Warning: someone with the
// node's privileges did it, and a container the pod starts from then on
// joins the new netns uncaptured.
func (r *Recorder) NetnsReplaced(pod PodRef, path, followed string) {
	if !named(pod) {
		return
	}
	msg := "another network namespace was mounted at the pod's netns path " + path +
		"; sluice wrote nothing to it, as it cannot prove it is the pod's. "
	if followed != "" {
		msg += "The pod's processes still hold its own netns, whose capture is verified at " + followed +
			"; a container started from now on joins the new one uncaptured: delete the pod to have it recreated with capture"
	} else {
		msg += "No process holds the pod's own netns any more, so sluice let go of it: delete the pod to have it recreated with capture"
	}
	r.Pod(pod.Namespace, pod.Name, types.UID(pod.UID), corev1.EventTypeWarning, ReasonNetnsReplaced, msg)
}

// named reports whether pod names a Kubernetes pod: cnitool and the demo
// call without one, and an Event needs an object.
func named(pod PodRef) bool { return pod.Namespace != "" && pod.Name != "" }
