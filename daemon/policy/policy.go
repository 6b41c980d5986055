// Package policy decides, from what is known about a pod, whether and how
// its traffic is captured. It returns a redirect.Spec or a reason to pass
// the pod through; it never touches the kernel.
package policy

import (
	"context"
	"fmt"

	"github.com/sluicemesh/sluice/daemon/redirect"
)

// Pod is what the runtime tells us about the pod (from CNI_ARGS).
type Pod struct {
	Namespace string
	Name      string
	UID       string
}

// Decision is the outcome for one pod.
type Decision struct {
	Capture bool
	Spec    redirect.Spec // meaningful when Capture
	Reason  string        // why the pod is passed through, or a note on the mode
	// Inputs are the policy inputs that shaped Spec, one "source: value"
	// each, for Debug.Explain.
	Inputs []string
	// ServiceAccount is the pod's, which ztunnel needs for its identity.
	ServiceAccount string
}

// Static is the standalone policy: every pod gets the same Spec. It is what
// the agent runs without a kubeconfig, and what `make demo` uses.
type Static struct {
	Spec redirect.Spec
}

// NewStatic validates spec once, so a bad flag fails at start, not at the
// first pod.
func NewStatic(spec redirect.Spec) (*Static, error) {
	if err := spec.Validate(); err != nil {
		return nil, fmt.Errorf("static policy: %w", err)
	}
	return &Static{Spec: spec}, nil
}

// Decide captures every pod in the static mode.
func (s *Static) Decide(_ context.Context, _ Pod) (Decision, error) {
	return Decision{Capture: true, Spec: s.Spec, Reason: "static policy: " + string(s.Spec.Mode),
		Inputs: []string{"--default-mode: " + string(s.Spec.Mode)}}, nil
}
