package main

import (
	"github.com/sluicemesh/sluice/daemon/events"
	"github.com/sluicemesh/sluice/daemon/podcheck"
	"github.com/sluicemesh/sluice/daemon/redirect"
)

// registerMetrics registers every metric read at scrape time, in one list
// (the request metrics are the rpc interceptor's, m.Unary). Each reads a
// part built before serve; a part the agent runs without registers nothing,
// so its metric is absent rather than a misleading 0.
func (a *agent) registerMetrics() {
	m := a.metrics
	m.ByLabel("gauge", "workloads_enrolled", "Enrolled workloads by capture mode.", "mode",
		[]string{string(redirect.ModeSidecar), string(redirect.ModeAmbient)}, a.store.CountByMode)
	m.Func("counter", "ruleset_reasserts_total", "Rulesets reasserted (re-applied) because the kernel drifted.",
		func() float64 { return float64(a.store.Reasserts()) })
	m.ByLabel("counter", "pods_passed_through_total", "ADDs the agent passed through uncaptured, by reason (the log line has the full text).",
		"reason", events.PassReasons, a.decisions.PassedThrough)
	m.Func("counter", "istio_init_pods_total", "Pods seen with istio-init injected (istiod not in CNI mode), once each.",
		func() float64 { return float64(a.decisions.IstioInitPods()) })
	m.Func("counter", "rpc_refused_connections_total", "Connections to the agent socket refused at the handshake (peer uid not allowed).",
		func() float64 { return float64(a.auth.Refused()) })
	m.Bool("ready", "1 when the agent takes pods (what /readyz and CNI STATUS say), else 0.", func() bool {
		ok, _ := a.checks.Ready()
		return ok
	})
	if a.amb != nil {
		m.Func("gauge", "ztunnel_connections", "ztunnel instances connected over ZDS.",
			func() float64 { return float64(a.amb.zds.Connections()) })
		m.Func("counter", "ztunnel_connects_total", "ZDS connections ztunnel opened to the agent; a rise on a steady node is a reconnect.",
			func() float64 { return float64(a.amb.zds.Accepted()) })
	}
	if a.kube != nil {
		m.Bool("policy_caches_synced", "1 once the pod and namespace informers have synced.", func() bool {
			ok, _ := a.kube.Synced()
			return ok
		})
	}
	if a.rep != nil {
		m.ByLabel("counter", "uncaptured_pods_repaired_total", "Pods found running uncaptured, by what --repair-mode did, and pods istio-cni captured (istio-captured: left to Istio, istio-adopted: taken over); failed counts every failed try.",
			"outcome", podcheck.Outcomes, a.rep.Counts)
	}
	if a.inst != nil {
		m.Func("counter", "installer_writes_total", "Files the installer wrote (installs and repairs).",
			func() float64 { return float64(a.inst.Stats().Writes) })
		m.Func("counter", "installer_restores_total", "Repairs of a binary or entry someone else removed or changed.",
			func() float64 { return float64(a.inst.Stats().Restores) })
	}
}
