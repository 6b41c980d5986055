package nodetaint

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/sluicemesh/sluice/daemon/admission"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// FenceDenial is the message of the chart's startup-taint admission policy
// (templates/startuptaintpolicy.yaml) for a request by the agent that
// changes more of its node than the taint. The fence check counts only a
// ValidatingAdmissionPolicy denial with this message as the fence in
// force: test/deploy holds the chart to it.
const FenceDenial = "sluice-agent may change nothing of a node but its startup taint"

// ProbeLabel is the label the fence check asks, in a dry run, to add to
// the agent's own node along with the taint's removal: a change the
// admission policy forbids.
const ProbeLabel = "sluice.dev/startup-taint-fence-probe"

// ReasonStartupTaintKept is the reason of the Warning Event on the Node
// when its agent keeps the startup taint because the fence is not in
// force.
const ReasonStartupTaintKept = "StartupTaintKept"

// errUnfenced says the dry run of a forbidden change was admitted.
var errUnfenced = errors.New("a dry run of a change the admission policy forbids (a label on the node) was admitted: " +
	"the policy or its binding is not in force, so nothing limits the agent's nodes: patch to its own node's startup taint")

// checkFence asks the API server, in a dry run that changes nothing, for
// the removal itself (the taints less the startup taint, kept) plus
// ProbeLabel on node. The policy allows the first half and forbids the
// second, so its refusal with FenceDenial says both that it is in force and
// that the removal alone would pass it (the policy reports its first failed
// rule: own node, taints, then the rest; a label alone would fail the
// taint rule first on a tainted node). nil: refused so, the fence is in
// force; errUnfenced: admitted; any other error: the answer is unknown.
func (r *Remover) checkFence(ctx context.Context, node *corev1.Node, kept []corev1.Taint) error {
	// A value the node does not carry: a label it already has would be no
	// change, pass the policy's comparison and read as an absent fence.
	value := "dry-run"
	if node.Labels[ProbeLabel] == value {
		value = "dry-run-again"
	}
	probe, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"labels": map[string]string{ProbeLabel: value}},
		"spec":     map[string]any{"taints": kept},
	})
	if err != nil {
		return fmt.Errorf("encode the fence probe: %w", err)
	}
	_, err = r.Client.CoreV1().Nodes().Patch(ctx, r.Node, types.MergePatchType, probe,
		metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
	switch {
	case err == nil:
		return errUnfenced
	case admission.DeniedBy(err, FenceDenial):
		return nil
	default:
		return fmt.Errorf("check the startup-taint admission policy with a dry run on node %s: %w", r.Node, err)
	}
}

// reportUnfenced records a Warning Event on the node, once each time the
// check finds the fence gone, where `kubectl describe node` shows it
// beside the taint it explains. Best effort: the log line and the metric
// say the same.
func (r *Remover) reportUnfenced(ctx context.Context, node *corev1.Node) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	now := metav1.Now()
	ev := &corev1.Event{
		// Node Events live in "default", as the kubelet's do.
		ObjectMeta:     metav1.ObjectMeta{Name: fmt.Sprintf("%s.%x", node.Name, now.UnixNano()), Namespace: metav1.NamespaceDefault},
		InvolvedObject: corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: node.Name, UID: node.UID},
		Type:           corev1.EventTypeWarning,
		Reason:         ReasonStartupTaintKept,
		Message: fmt.Sprintf("sluice-agent keeps the startup taint %s: %v; restore the chart's ValidatingAdmissionPolicy "+
			"<release>-startup-taint and its binding (Deny)", r.Key, errUnfenced),
		Source:              corev1.EventSource{Component: "sluice-agent", Host: r.Node},
		FirstTimestamp:      now,
		LastTimestamp:       now,
		Count:               1,
		ReportingController: "sluice-agent",
		ReportingInstance:   "sluice-agent-" + r.Node,
	}
	if _, err := r.Client.CoreV1().Events(metav1.NamespaceDefault).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
		r.Log.Warn("record the startup-taint event", "node", r.Node, "err", err)
	}
}
