package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/sluicemesh/sluice/daemon/events"
	"github.com/sluicemesh/sluice/daemon/policy"
	"github.com/sluicemesh/sluice/daemon/repair"
	"github.com/sluicemesh/sluice/daemon/workloads"
)

// newEvents builds the Kubernetes client and the Event recorder the agent
// reports capture failures, reasserted rulesets and late enrolment with.
func newEvents(cfg *config, rc *rest.Config, log *slog.Logger) (kubernetes.Interface, *events.Recorder, error) {
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, nil, fmt.Errorf("kubernetes client for %s: %w", rc.Host, err)
	}
	return client, events.New(events.Config{Client: client, NodeName: cfg.nodeName, Log: log.With("component", "events")}), nil
}

// startRepair runs late enrolment (pods found running uncaptured, handled
// per --repair-mode). ztunnelReady (nil without --ambient) holds back the
// adoption of istio-cni's ambient pods until a ztunnel has its snapshot.
func startRepair(ctx context.Context, cfg *config, client kubernetes.Interface, rec *events.Recorder, kube *policy.Kube, store *workloads.Store,
	ztunnelReady func() (bool, string), log *slog.Logger) (*repair.Repairer, error) {
	label, err := repair.ParseLabel(cfg.repairLabel) // validated by parseConfig
	if err != nil {
		return nil, err
	}
	rep, err := repair.New(repair.Config{Policy: kube, Store: store, Client: client, Events: rec,
		HostProc: cfg.hostProc, Mode: cfg.repairMode, Label: label, NodeName: cfg.nodeName, Log: log.With("component", "repair"),
		IstioTakeover: cfg.istioTakeover, ZtunnelReady: ztunnelReady})
	if err != nil {
		return nil, err
	}
	go func() {
		if err := rep.Run(ctx); err != nil && ctx.Err() == nil {
			log.Error("repair of uncaptured pods stopped", "err", err)
		}
	}()
	return rep, nil
}

// flushEvents gives queued Events a few seconds to reach the API server.
func flushEvents(rec *events.Recorder) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rec.Shutdown(ctx)
}
