package main

import (
	"slices"

	"github.com/sluicemesh/sluice/daemon/events"
	"github.com/sluicemesh/sluice/daemon/redirect"
	"github.com/sluicemesh/sluice/daemon/rpc"
	"github.com/sluicemesh/sluice/daemon/workloads"
)

// The what of sluice_capture_restored_total for a socket file someone
// removed and the agent listened on again: without it no plugin (agent
// socket) or restarted ztunnel (ZDS socket) could reach the agent, and no
// pod could be captured.
const (
	restoredAgentSocket = "agent_socket"
	restoredZDSSocket   = "zds_socket" // with --ambient
)

// restoredKinds is every what of sluice_capture_restored_total this agent
// exports.
func (a *agent) restoredKinds() []string {
	kinds := append(slices.Clone(workloads.RestoredKinds), restoredAgentSocket)
	if a.amb != nil {
		kinds = append(kinds, restoredZDSSocket)
	}
	return kinds
}

// restored counts restores by what was put back: the store's in running
// pods, and the sockets'.
func (a *agent) restored(lis *rpc.Listener) map[string]int {
	n := a.store.Restored()
	n[restoredAgentSocket] = int(lis.Restored())
	if a.amb != nil {
		n[restoredZDSSocket] = int(a.amb.ZDS().SocketRestores())
	}
	return n
}

// registerMetrics registers every metric read at scrape time: the core's
// here, then each optional part's (part.metrics); the request metrics are
// the rpc interceptor's, m.Unary. Each reads a part built before serve, or
// the agent socket serve opens (lis).
func (a *agent) registerMetrics(lis *rpc.Listener) {
	m := a.metrics
	m.ByLabel("gauge", "workloads_enrolled", "Enrolled workloads by capture mode.", "mode",
		[]string{string(redirect.ModeSidecar), string(redirect.ModeAmbient)}, a.store.CountByMode)
	m.Func("counter", "ruleset_reasserts_total", "Rulesets reasserted (re-applied) because the kernel drifted.",
		func() float64 { return float64(a.store.Reasserts()) })
	m.ByLabel("counter", "capture_restored_total", "Capture restored in running pods, by what was lost (a reassert counts each kind its drift named), and the agent's sockets listened on again once removed.",
		"what", a.restoredKinds(), func() map[string]int { return a.restored(lis) })
	m.ByLabel("counter", "netns_replaced_total", "Pod netns paths found naming another netns than the one enrolled, by what the agent did (followed: the pod's own netns, still held, verified where it is; dropped: none holds it, record dropped). Nothing is written to the new netns.",
		"outcome", workloads.ReplacedOutcomes, a.store.NetnsReplaced)
	m.ByLabel("counter", "pods_passed_through_total", "ADDs the agent passed through uncaptured, by reason (the log line has the full text).",
		"reason", events.PassReasons, a.decisions.PassedThrough)
	m.Func("counter", "istio_init_pods_total", "Pods seen with istio-init injected (istiod not in CNI mode), once each.",
		func() float64 { return float64(a.decisions.IstioInitPods()) })
	m.Func("counter", "rpc_refused_connections_total", "Connections to the agent socket refused at the handshake (peer uid not allowed).",
		func() float64 { return float64(a.auth.Refused()) })
	m.Func("gauge", "cni_adds_waiting", "ADDs waiting for an in-flight slot (--max-inflight): the queue depth of a burst.",
		func() float64 { return float64(a.cni.Inflight.Waiting()) })
	m.Bool("ready", "1 when the agent takes pods (what /readyz and CNI STATUS say), else 0.", func() bool {
		ok, _ := a.checks.Ready()
		return ok
	})
	for _, p := range a.parts {
		p.metrics(m)
	}
}
