package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/sluicemesh/sluice/daemon/events"
	"github.com/sluicemesh/sluice/daemon/podcheck"
	"github.com/sluicemesh/sluice/daemon/repair"
)

// newEvents builds the Kubernetes client and the Event recorder the agent
// reports capture failures, reasserted rulesets and repairs with.
func newEvents(cfg *config, rc *rest.Config, log *slog.Logger) (kubernetes.Interface, *events.Recorder, error) {
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, nil, fmt.Errorf("kubernetes client for %s: %w", rc.Host, err)
	}
	return client, events.New(events.Config{Client: client, NodeName: cfg.nodeName, Log: log.With("component", "events")}), nil
}

// startRepair runs the checks of running pods (podcheck: pods found running
// uncaptured, handled per --repair-mode; live ambient enrolment; istio-cni
// adoption) on the shared informers. With --ambient, the adoption of
// istio-cni's ambient pods waits until a ztunnel has its snapshot.
func (a *agent) startRepair() error {
	label, err := repair.ParseLabel(a.cfg.repairLabel) // validated by parseConfig
	if err != nil {
		return err
	}
	var ztunnelReady func() (bool, string)
	if a.amb != nil {
		ztunnelReady = a.amb.zds.Ready
	}
	a.rep, err = podcheck.New(podcheck.Config{Policy: a.kube, Pods: a.informers.Pods, Namespaces: a.informers.Namespaces,
		Store: a.store, Client: a.client, Events: a.rec, HostProc: a.cfg.hostProc, Mode: a.cfg.repairMode, Label: label,
		NodeName: a.cfg.nodeName, Log: a.log.With("component", "repair"), IstioTakeover: a.cfg.istioTakeover, ZtunnelReady: ztunnelReady})
	if err != nil {
		return err
	}
	go func() {
		if err := a.rep.Run(a.ctx); err != nil && a.ctx.Err() == nil {
			a.log.Error("repair of uncaptured pods stopped", "err", err)
		}
	}()
	return nil
}

// flushEvents gives queued Events a few seconds to reach the API server.
func flushEvents(rec *events.Recorder) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rec.Shutdown(ctx)
}
