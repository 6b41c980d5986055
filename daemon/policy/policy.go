// Package policy decides, from what is known about a pod, whether and how
// its traffic is captured. It returns a redirect.Spec or a reason to pass
// the pod through; it never touches the kernel.
//
// Which families are captured follows istio-iptables: IPv4 always, IPv6
// when the pod has no IPv4 address, or ISTIO_DUAL_STACK=true and it has an
// IPv6 one. The pod's addresses come from prevResult, else its netns (read
// over netlink: under Multus there is no prevResult), else its status;
// with none known both families are captured. The probe SNAT addresses
// are the one config method's, for the host table and every ambient Spec
// alike; a journaled record keeps the addresses it was applied with until
// it is added again.
package policy

import (
	"context"
	"fmt"
	"net/netip"
	"slices"

	"github.com/sluicemesh/sluice/daemon/redirect"
)

// Pod is what the runtime tells us about the pod (from CNI_ARGS) and the
// addresses the primary plugin gave it (from prevResult).
type Pod struct {
	Namespace string
	Name      string
	UID       string
	// IPs are the pod's addresses; empty when the runtime gave none (a
	// CNI call without prevResult), and then the API server's are used.
	IPs []netip.Addr
}

// Decision is the outcome for one pod.
type Decision struct {
	Capture bool
	Spec    redirect.Spec // meaningful when Capture
	Reason  string        // why the pod is passed through, or a note on the mode
	// Inputs are the policy inputs that shaped Spec, one "source: value"
	// each, for Debug.Explain.
	Inputs []string
	// Warnings are inputs that were ignored (a value Istio also ignores,
	// such as a boolean annotation that does not parse); the agent logs
	// them. They are in Inputs too.
	Warnings []string
	// ServiceAccount is the pod's, which ztunnel needs for its identity.
	ServiceAccount string
}

func (d *Decision) warn(msg string) {
	d.Inputs = append(d.Inputs, msg)
	d.Warnings = append(d.Warnings, msg)
}

// Static is the standalone policy: every pod gets the same Spec, except
// those in excluded namespaces. It is what the agent runs without a
// kubeconfig, and what `make demo` uses.
type Static struct {
	Spec redirect.Spec
	// ExcludeNamespaces are passed through, as the plugin passes them
	// itself when it has the list.
	ExcludeNamespaces []string
	// ServiceAccount is every pod's, as ztunnel is told it. ztunnel
	// matches a local workload by name, namespace and service account,
	// and istiod always sends one, so it is never empty.
	ServiceAccount string
}

// DefaultServiceAccount is Kubernetes' own, which a pod gets when its spec
// names none.
const DefaultServiceAccount = "default"

// NewStatic validates spec once, so a bad flag fails at start, not at the
// first pod. An empty serviceAccount is DefaultServiceAccount.
func NewStatic(spec redirect.Spec, serviceAccount string, excludeNamespaces ...string) (*Static, error) {
	if err := spec.Validate(); err != nil {
		return nil, fmt.Errorf("static policy: %w", err)
	}
	if serviceAccount == "" {
		serviceAccount = DefaultServiceAccount
	}
	return &Static{Spec: spec, ExcludeNamespaces: excludeNamespaces, ServiceAccount: serviceAccount}, nil
}

// Decide captures every pod outside the excluded namespaces in the static
// mode.
func (s *Static) Decide(_ context.Context, p Pod) (Decision, error) {
	if p.Namespace != "" && slices.Contains(s.ExcludeNamespaces, p.Namespace) {
		return excludedNamespace(p.Namespace), nil
	}
	sa := s.ServiceAccount
	if sa == "" {
		sa = DefaultServiceAccount
	}
	return Decision{Capture: true, Spec: s.Spec, Reason: "static policy: " + string(s.Spec.Mode),
		Inputs: []string{"--default-mode: " + string(s.Spec.Mode)}, ServiceAccount: sa}, nil
}

func excludedNamespace(ns string) Decision {
	return Decision{Reason: "namespace " + ns + " is excluded", Inputs: []string{"--exclude-namespaces: " + ns}}
}
