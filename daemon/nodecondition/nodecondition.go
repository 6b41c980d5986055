// Package nodecondition publishes the agent's readiness as a condition of
// its own Node (sluice.dev/MeshReady by default in the chart), so the
// platform can gate pods on it: Kubernetes' Node Readiness Controller (a
// NodeReadinessRule maps the condition to a taint) or a platform's own
// tooling. The condition follows the agent's verdict: the publisher wakes
// on each verdict the health checks publish (at least every second) and
// patches only what changed, so a change reaches the API server within a
// second plus the patch; an unchanged condition is patched again every
// Refresh (its lastHeartbeatTime, as the kubelet's conditions carry one),
// so a condition a lost write left wrong heals, and a dead agent's
// condition shows its age.
//
// It writes its one condition type and nothing else: never the Node's
// Ready condition, never a taint; and only once a dry run has shown the
// chart's admission policy, which holds it to that, in force (fence.go). An agent outage can therefore not make
// the node NotReady or bring a NoExecute taint; whatever a rule does with
// the condition is the platform's choice. A graceful stop sets it False
// (AgentStopping) before the agent drains; a crash cannot, so a reader
// treats a heartbeat older than a few Refresh periods as unknown.
package nodecondition

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// Reasons of the condition. Reasons are API: a rule, an alert or a
// person's grep reads them.
const (
	ReasonReady = "MeshReady"
	// ReasonStopping is a graceful stop: the agent set it on SIGTERM.
	ReasonStopping = "AgentStopping"
)

// State is the condition the publisher should show: True or False, a
// CamelCase reason, and a message naming what is missing.
type State struct {
	OK      bool
	Reason  string
	Message string
}

func (s State) status() corev1.ConditionStatus {
	if s.OK {
		return corev1.ConditionTrue
	}
	return corev1.ConditionFalse
}

// Publisher keeps condition Type on Node's status equal to Want.
type Publisher struct {
	Client kubernetes.Interface
	Node   string
	Type   corev1.NodeConditionType
	// Want is the condition as the agent sees it now; cheap (it reads the
	// last verdict, runs no check).
	Want func() State
	// Wake returns a channel closed when Want may have changed (the next
	// health verdict).
	Wake func() <-chan struct{}
	// Refresh is how often an unchanged condition is patched again.
	Refresh time.Duration
	// Retry is the first wait after a failed patch, doubling up to
	// MaxBackoff: a refusing API server is asked at most that often, by
	// every node, whatever the verdicts do meanwhile.
	Retry, MaxBackoff time.Duration
	// Timeout bounds each patch.
	Timeout time.Duration
	Log     *slog.Logger

	// fenced is set once a dry run showed the chart's policy in force
	// (fence.go); checked once, before the first write.
	fenced atomic.Bool
}

// shown is what the API server holds as far as the publisher knows.
type shown struct {
	known      bool
	state      State
	at         time.Time // when it was last patched (the heartbeat)
	transition metav1.Time
}

// Run publishes until ctx ends.
func (p *Publisher) Run(ctx context.Context) {
	var cur shown
	backoff := p.Retry
	var retryAt time.Time
	for {
		wake := p.Wake()
		want, now := p.Want(), time.Now()
		stale := !cur.known || cur.state != want || now.Sub(cur.at) >= p.Refresh
		if stale && !now.Before(retryAt) {
			next, err := p.patch(ctx, cur, want)
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				p.Log.Warn("publish the node condition", "node", p.Node, "condition", p.Type, "err", err, "retry_in", backoff)
				retryAt, backoff = now.Add(backoff), min(2*backoff, p.MaxBackoff)
			} else {
				if !cur.known || cur.state != want {
					p.Log.Info("node condition", "node", p.Node, "condition", p.Type, "status", want.status(), "reason", want.Reason,
						"message", want.Message)
				}
				cur, backoff, retryAt = next, p.Retry, time.Time{}
			}
		}
		var wait time.Duration
		if !retryAt.IsZero() {
			wait = time.Until(retryAt)
		} else {
			wait = time.Until(cur.at.Add(p.Refresh))
		}
		select {
		case <-ctx.Done():
			return
		case <-wake:
		case <-time.After(max(wait, 0)):
		}
	}
}

// Stopping sets the condition False with ReasonStopping, once, within the
// publisher's Timeout: the agent is going and nothing will keep the
// condition true. Run must have returned (or it could write True again).
func (p *Publisher) Stopping(ctx context.Context, message string) error {
	_, err := p.patch(ctx, shown{}, State{Reason: ReasonStopping, Message: message})
	return err
}

// patch writes want with a strategic merge patch of the status, which
// merges conditions by type: the other conditions (the kubelet's Ready
// among them) are not part of the request, so a concurrent kubelet update
// is never undone. lastTransitionTime moves only when the status does, as
// the kubelet's; the first patch after a start reads the node to learn it.
func (p *Publisher) patch(ctx context.Context, cur shown, want State) (shown, error) {
	ctx, cancel := context.WithTimeout(ctx, p.Timeout)
	defer cancel()
	if !p.fenced.Load() {
		if err := p.checkFence(ctx); err != nil {
			return cur, err
		}
		p.fenced.Store(true)
	}
	if !cur.known {
		var err error
		if cur, err = p.read(ctx); err != nil {
			return cur, err
		}
	}
	now := metav1.Now()
	transition := cur.transition
	if !cur.known || cur.state.OK != want.OK || transition.IsZero() {
		transition = now
	}
	cond := corev1.NodeCondition{Type: p.Type, Status: want.status(), Reason: want.Reason, Message: want.Message,
		LastHeartbeatTime: now, LastTransitionTime: transition}
	body, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.NodeCondition{cond}}})
	if err != nil {
		return cur, fmt.Errorf("encode the node condition: %w", err)
	}
	if _, err := p.Client.CoreV1().Nodes().Patch(ctx, p.Node, types.StrategicMergePatchType, body, metav1.PatchOptions{},
		"status"); err != nil {
		return cur, fmt.Errorf("patch the status of node %s: %w", p.Node, err)
	}
	return shown{known: true, state: want, at: now.Time, transition: transition}, nil
}

// read learns the condition the node holds now, so a restarted agent keeps
// its lastTransitionTime while the status is unchanged. It is not known
// yet (known false) when the node has none: the next patch is a transition.
func (p *Publisher) read(ctx context.Context) (shown, error) {
	node, err := p.Client.CoreV1().Nodes().Get(ctx, p.Node, metav1.GetOptions{})
	if err != nil {
		return shown{}, fmt.Errorf("get node %s: %w", p.Node, err)
	}
	for _, c := range node.Status.Conditions {
		if c.Type == p.Type {
			return shown{known: true, state: State{OK: c.Status == corev1.ConditionTrue, Reason: c.Reason, Message: c.Message},
				at: c.LastHeartbeatTime.Time, transition: c.LastTransitionTime}, nil
		}
	}
	return shown{}, nil
}
