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

// repairPart runs the checks of running pods (podcheck: pods found running
// uncaptured, handled per --repair-mode; live ambient enrolment; istio-cni
// adoption) on the shared informers.
type repairPart struct {
	basePart
	checker *podcheck.Checker
	log     *slog.Logger
}

// buildRepair builds the checks with Kubernetes. With --ambient, the
// adoption of istio-cni's ambient pods waits until a ztunnel has its
// snapshot.
func (a *agent) buildRepair() error {
	if a.k == nil {
		return nil
	}
	label, err := repair.ParseLabel(a.cfg.repairLabel) // validated by parseConfig
	if err != nil {
		return err
	}
	var ztunnelReady func() (bool, string)
	if a.amb != nil {
		ztunnelReady = a.amb.ZDS().Ready
	}
	c, err := podcheck.New(podcheck.Config{Policy: a.k.policy, Pods: a.k.informers.Pods, Namespaces: a.k.informers.Namespaces,
		Store: a.store, Client: a.k.client, Events: a.k.rec, HostProc: a.cfg.hostProc, Mode: a.cfg.repairMode, Label: label,
		NodeName: a.cfg.nodeName, Log: a.log.With("component", "repair"), IstioTakeover: a.cfg.istioTakeover, ZtunnelReady: ztunnelReady, Mesh: a.mesh})
	if err != nil {
		return err
	}
	a.parts = append(a.parts, &repairPart{checker: c, log: a.log})
	return nil
}

func (p *repairPart) start(ctx context.Context, _ func(error)) error {
	go func() {
		if err := p.checker.Run(ctx); err != nil && ctx.Err() == nil {
			p.log.Error("repair of uncaptured pods stopped", "err", err)
		}
	}()
	return nil
}

func (p *repairPart) metrics(m *metrics.Metrics) {
	m.ByLabel("counter", "uncaptured_pods_repaired_total", "Pods found running uncaptured, by what --repair-mode did, and pods istio-cni captured (istio-captured: left to Istio, istio-adopted: taken over); failed counts every failed try.",
		"outcome", podcheck.Outcomes, p.checker.Counts)
}

// flushEvents gives queued Events a few seconds to reach the API server.
func flushEvents(rec *events.Recorder) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rec.Shutdown(ctx)
}
