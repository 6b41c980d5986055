package nodecondition

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluicemesh/sluice/daemon/admission"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// FenceDenial is the message of the chart's node-condition admission
// policy (templates/nodeconditionpolicy.yaml) for a status write by the
// agent that changes more of its node than its condition. The publisher
// counts only a ValidatingAdmissionPolicy denial with this message as the
// fence in force.
const FenceDenial = "sluice-agent may change nothing of a node but its node condition"

// ProbeLabel is the label the fence check asks, in a dry run, to add to
// the agent's own node through its status: a change the policy forbids.
const ProbeLabel = "sluice.dev/node-condition-fence-probe"

// errUnfenced says the dry run of a forbidden status change was admitted.
var errUnfenced = errors.New("a dry run of a status change the admission policy forbids (a label on the node) was admitted: " +
	"the policy or its binding is not in force, so nothing limits the agent's nodes/status: patch to its own node's condition; " +
	"restore the chart's ValidatingAdmissionPolicy <release>-node-condition and its binding")

// checkFence asks the API server, in a dry run that writes nothing, for a
// label on the agent's own node through the status subresource, which the
// chart's policy refuses with FenceDenial. Without that policy the agent's
// grant reaches every node's status, the kubelet's Ready condition
// included: the publisher then writes nothing. nil: refused so;
// errUnfenced: admitted; any other error: the answer is unknown.
func (p *Publisher) checkFence(ctx context.Context) error {
	// A value no node carries, so the probe is always a change.
	probe := fmt.Sprintf(`{"metadata":{"labels":{%q:"dry-run-%d"}}}`, ProbeLabel, time.Now().UnixNano())
	_, err := p.Client.CoreV1().Nodes().Patch(ctx, p.Node, types.StrategicMergePatchType, []byte(probe),
		metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}}, "status")
	switch {
	case err == nil:
		return errUnfenced
	case admission.DeniedBy(err, FenceDenial):
		return nil
	default:
		return fmt.Errorf("check the node-condition admission policy with a dry run on node %s: %w", p.Node, err)
	}
}
