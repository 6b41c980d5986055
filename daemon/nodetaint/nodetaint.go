// Package nodetaint removes a node's startup taint once the node's own
// agent is ready. A node registers with a NoSchedule taint (Istio's
// cni.istio.io/not-ready by default) so no pod lands on it before the
// agent's conflist entry is in place, its caches synced and its socket
// serving; the agent then removes that one taint from its own node, with
// no control plane in between. The chart's admission policy holds the agent
// to exactly that change, and the agent uses its nodes: patch only while a
// dry run shows that policy in force (fence.go): without it the token could
// change any node, so the taint stays and the agent says why.
package nodetaint

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// DefaultKey is the taint key Istio's CNI uses for the same purpose, so
// nodes set up for istio-cni work unchanged.
const DefaultKey = "cni.istio.io/not-ready"

// Remover removes the taint Key from Node once Ready says yes and the
// admission policy fences its nodes: patch.
type Remover struct {
	Client kubernetes.Interface
	Node   string
	Key    string
	Ready  func() (bool, string)
	Log    *slog.Logger
	// Poll is how often readiness is read (a cached verdict, cheap).
	Poll time.Duration
	// MaxBackoff caps the wait between failed tries (a refused removal, or
	// a fence not in force).
	MaxBackoff time.Duration

	// unfenced is the last fence check's finding: the policy not in force.
	unfenced atomic.Bool
}

// Unfenced reports whether the taint stays because the last check found
// the admission policy not in force (for the metric).
func (r *Remover) Unfenced() bool { return r.unfenced.Load() }

// Run waits for readiness, then checks the fence and removes the taint,
// retrying either with a backoff; it returns once the node carries no such
// taint, or when ctx ends.
func (r *Remover) Run(ctx context.Context) {
	if !r.waitReady(ctx) {
		return
	}
	backoff := r.Poll
	for {
		removed, err := r.remove(ctx)
		if err == nil {
			if removed {
				r.Log.Info("removed the node's startup taint", "node", r.Node, "taint", r.Key)
			}
			return
		}
		if errors.Is(err, errUnfenced) {
			r.Log.Warn("kept the node's startup taint: its admission policy is not in force", "node", r.Node, "taint", r.Key,
				"err", err, "retry_in", backoff)
		} else {
			r.Log.Warn("remove the node's startup taint", "node", r.Node, "taint", r.Key, "err", err, "retry_in", backoff)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, r.MaxBackoff)
	}
}

func (r *Remover) waitReady(ctx context.Context) bool {
	for {
		if ok, _ := r.Ready(); ok {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(r.Poll):
		}
	}
}

// remove takes the taint out of the node's list in one JSON patch that
// first tests the list is still what was read, so a taint another writer
// added meanwhile (the node lifecycle controller's) is never dropped: the
// test fails and the next try reads again. It patches only once a dry run
// has shown the fence in force; errUnfenced when it is not.
func (r *Remover) remove(ctx context.Context) (bool, error) {
	node, err := r.Client.CoreV1().Nodes().Get(ctx, r.Node, metav1.GetOptions{})
	if err != nil {
		return false, fmt.Errorf("get node %s: %w", r.Node, err)
	}
	kept := Without(node.Spec.Taints, r.Key)
	if len(kept) == len(node.Spec.Taints) {
		return false, nil
	}
	if err := r.checkFence(ctx, node, kept); err != nil {
		if errors.Is(err, errUnfenced) && !r.unfenced.Swap(true) {
			r.reportUnfenced(ctx, node)
		}
		return false, err
	}
	r.unfenced.Store(false)
	patch, err := json.Marshal([]map[string]any{
		{"op": "test", "path": "/spec/taints", "value": node.Spec.Taints},
		{"op": "replace", "path": "/spec/taints", "value": kept},
	})
	if err != nil {
		return false, fmt.Errorf("encode the taint patch: %w", err)
	}
	if _, err := r.Client.CoreV1().Nodes().Patch(ctx, r.Node, types.JSONPatchType, patch, metav1.PatchOptions{}); err != nil {
		return false, fmt.Errorf("patch node %s: %w", r.Node, err)
	}
	return true, nil
}

// Without is taints less every taint with key, in order; never nil, so the
// patch writes an empty list rather than null.
func Without(taints []corev1.Taint, key string) []corev1.Taint {
	kept := []corev1.Taint{}
	for _, t := range taints {
		if t.Key != key {
			kept = append(kept, t)
		}
	}
	return kept
}
