package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/sluicemesh/sluice/daemon/events"
	"github.com/sluicemesh/sluice/daemon/metrics"
	"github.com/sluicemesh/sluice/daemon/policy"
	"github.com/sluicemesh/sluice/daemon/repair"
	"github.com/sluicemesh/sluice/daemon/workloads"
)

// startRepair runs late enrolment (pods found running uncaptured, handled
// per --repair-mode) and returns the Event recorder the rest of the agent
// reports capture failures and drift repairs with.
func startRepair(ctx context.Context, cfg *config, rc *rest.Config, kube *policy.Kube, store *workloads.Store, m *metrics.Metrics, log *slog.Logger) (*events.Recorder, *repair.Redirection, error) {
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, nil, fmt.Errorf("kubernetes client for %s: %w", rc.Host, err)
	}
	rec := events.New(events.Config{Client: client, NodeName: cfg.nodeName, Log: log.With("component", "events")})
	label, err := repair.ParseLabel(cfg.repairLabel) // validated by parseConfig
	if err != nil {
		return nil, nil, err
	}
	rep, err := repair.New(repair.Config{Policy: kube, Store: store, Client: client, Events: rec,
		HostProc: cfg.hostProc, Mode: cfg.repairMode, Label: label, NodeName: cfg.nodeName, Log: log.With("component", "repair")})
	if err != nil {
		rec.Shutdown(context.Background())
		return nil, nil, err
	}
	go func() {
		if err := rep.Run(ctx); err != nil && ctx.Err() == nil {
			log.Error("repair of uncaptured pods stopped", "err", err)
		}
	}()
	m.ByLabel("counter", "uncaptured_pods_repaired_total", "Pods found running uncaptured, by what --repair-mode did; failed counts every failed try.",
		"outcome", repair.Outcomes, rep.Repairs)
	store.OnRepair = func(r workloads.Record, drift []string) {
		rec.RulesetRepaired(policy.Pod{Namespace: r.PodNamespace, Name: r.PodName, UID: r.PodUID}, drift)
	}
	return rec, rep.Redirection(), nil
}

// flushEvents gives queued Events a few seconds to reach the API server.
func flushEvents(rec *events.Recorder) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rec.Shutdown(ctx)
}
