package main

import (
	"log/slog"
	"time"

	"github.com/sluicemesh/sluice/daemon/events"
	"github.com/sluicemesh/sluice/daemon/metrics"
	"github.com/sluicemesh/sluice/daemon/podns"
	"github.com/sluicemesh/sluice/daemon/redirect/kernel"
	"github.com/sluicemesh/sluice/daemon/workloads"
)

// openStore loads the journal with every hook the store reports through
// handed over at once, so the start-up Reconcile already observes applies
// and records an Event for each ruleset it reasserts and each netns
// path it finds replaced.
func openStore(cfg *config, opener *podns.Opener, amb *workloads.Ambient, m *metrics.Metrics, rec *events.Recorder, log *slog.Logger) (*workloads.Store, error) {
	return workloads.Open(workloads.Config{
		Dir:     cfg.stateDir,
		Opener:  opener,
		Kernel:  kernel.Netlink{},
		Log:     log.With("component", "workloads"),
		OnApply: func(d time.Duration) { m.ApplySeconds.Observe(d.Seconds()) },
		OnReassert: func(r workloads.Record, drift []string) {
			rec.RulesetReasserted(events.PodRef{Namespace: r.PodNamespace, Name: r.PodName, UID: r.PodUID}, drift)
		},
		OnNetnsReplaced: func(r workloads.Record, followed string) {
			rec.NetnsReplaced(events.PodRef{Namespace: r.PodNamespace, Name: r.PodName, UID: r.PodUID}, r.Netns, followed)
		},
		Ambient: amb,
	})
}
