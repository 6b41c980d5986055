package main

import (
	"context"
	"slices"

	"github.com/sluicemesh/sluice/daemon/policy"
	"github.com/sluicemesh/sluice/daemon/rpc"
)

// excluding passes pods of --exclude-namespaces through, so the standalone
// agent agrees with the plugin, which skips them from the same list: a
// call that reaches the agent anyway (an older entry, a direct gRPC call)
// must not capture them.
type excluding struct {
	rpc.Policy
	namespaces []string
}

func (e excluding) Decide(ctx context.Context, pod policy.Pod) (policy.Decision, error) {
	if slices.Contains(e.namespaces, pod.Namespace) {
		return policy.Decision{Reason: "namespace " + pod.Namespace + " is excluded",
			Inputs: []string{"--exclude-namespaces: " + pod.Namespace}}, nil
	}
	return e.Policy.Decide(ctx, pod)
}

// standalonePolicy is the policy without a kubeconfig: --default-mode for
// every pod outside --exclude-namespaces.
func standalonePolicy(cfg *config) (rpc.Policy, error) {
	pol, err := staticPolicy(cfg)
	if err != nil {
		return nil, err
	}
	return excluding{pol, splitList(cfg.excludeNamespaces)}, nil
}
