package main

import (
	"cmp"
	"context"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/sluicemesh/sluice/daemon/nodecondition"
)

// conditionPart keeps the agent's readiness on its own Node as the
// condition --node-condition names (in Kubernetes only; standalone has no
// node object). It stops first thing at shutdown and says AgentStopping.
type conditionPart struct {
	basePart
	pub *nodecondition.Publisher
	// run is the publisher's own context, ended by stop before it writes
	// AgentStopping (a running publisher would write True again).
	run    context.Context
	cancel context.CancelFunc
	done   chan struct{}
}

// The publisher's timing. conditionRefresh is the heartbeat: a minute
// costs a fleet of 5,000 nodes ~80 small status patches a second, and a
// reader finds a dead agent's condition within a few minutes (the kubelet
// reports an unchanged status every 5 minutes).
const (
	conditionRefresh    = time.Minute
	conditionRetry      = 200 * time.Millisecond
	conditionMaxBackoff = 30 * time.Second
	conditionTimeout    = 5 * time.Second
	// conditionStopTimeout bounds the AgentStopping write on SIGTERM: the
	// drain must not wait on an API server that is away.
	conditionStopTimeout = 2 * time.Second
)

func (a *agent) buildCondition() error {
	if a.k == nil || a.cfg.nodeCondition == "" {
		return nil
	}
	var ztunnel func() (bool, string)
	if a.amb != nil {
		ztunnel = a.amb.ZDS().Ready
	}
	pub := &nodecondition.Publisher{Client: a.k.client, Node: a.cfg.nodeName, Type: corev1.NodeConditionType(a.cfg.nodeCondition),
		Want: meshState(a.checks.Failing, ztunnel), Wake: a.checks.Published, Refresh: conditionRefresh,
		Retry: conditionRetry, MaxBackoff: conditionMaxBackoff, Timeout: conditionTimeout,
		Log: a.log.With("component", "node-condition")}
	run, cancel := context.WithCancel(a.ctx)
	a.parts = append(a.parts, &conditionPart{pub: pub, run: run, cancel: cancel, done: make(chan struct{})})
	return nil
}

// start publishes from before the socket serves: a restarted agent's node
// says why it is not ready yet rather than what its predecessor last said.
func (p *conditionPart) start(context.Context, func(error)) error {
	go func() { defer close(p.done); p.pub.Run(p.run) }()
	return nil
}

// stop, before the drain: the publisher ends, then the condition goes
// False (AgentStopping), so the platform stops sending pods that need
// capture while no agent serves. A crash skips this; the heartbeat ages.
func (p *conditionPart) stop(leaving, drained bool) {
	if drained {
		return
	}
	p.cancel()
	<-p.done
	ctx, cancel := context.WithTimeout(context.Background(), conditionStopTimeout)
	defer cancel()
	msg := "sluice-agent is stopping (SIGTERM); pods that need capture wait for the next agent"
	if leaving {
		msg = "sluice-agent is leaving this node (uninstalled or no longer scheduled here)"
	}
	if err := p.pub.Stopping(ctx, msg); err != nil {
		p.pub.Log.Warn("set the node condition to AgentStopping", "err", err)
	}
}

// checkReasons names, for each readiness check, the condition's reason
// when it fails first. Reasons are API; a check not listed is AgentNotReady.
var checkReasons = map[string]string{
	"socket":         "AgentNotServing",
	"grpc":           "AgentNotServing",
	"installer":      "PluginNotInstalled",
	"policy":         "CachesNotSynced",
	"nri":            "NRINotConnected",
	"ztunnel-socket": "ZtunnelSocketLost",
}

// maxMessage bounds the condition's message: the Node object is read by
// every node watcher in the cluster.
const maxMessage = 512

// meshState is the condition as the agent sees it: the readiness verdict
// (every check /readyz and CNI STATUS read) and, with --ambient, a ztunnel
// connected. The reason is the first failing check's; the message names
// each missing thing.
func meshState(failing func() ([]string, string), ztunnel func() (bool, string)) func() nodecondition.State {
	return func() nodecondition.State {
		names, why := failing()
		var reason string
		var missing []string
		switch {
		case len(names) > 0:
			reason = cmp.Or(checkReasons[names[0]], "AgentNotReady")
			missing = append(missing, why)
		case why != "": // no standing verdict: none yet, or a check hangs
			reason = "AgentNotReady"
			missing = append(missing, why)
		}
		if ztunnel != nil {
			if ok, zwhy := ztunnel(); !ok {
				reason = cmp.Or(reason, "ZtunnelNotConnected")
				missing = append(missing, "ztunnel: "+zwhy)
			}
		}
		if len(missing) == 0 {
			msg := "sluice-agent ready: plugin entry installed, caches synced, socket serving"
			if ztunnel != nil {
				msg += ", ztunnel connected"
			}
			return nodecondition.State{OK: true, Reason: nodecondition.ReasonReady, Message: msg}
		}
		msg := strings.Join(missing, "; ")
		if len(msg) > maxMessage {
			msg = strings.ToValidUTF8(msg[:maxMessage-3], "") + "..."
		}
		return nodecondition.State{Reason: reason, Message: msg}
	}
}
