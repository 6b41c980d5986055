package main

import (
	"context"
	"time"

	"github.com/sluicemesh/sluice/daemon/metrics"
	"github.com/sluicemesh/sluice/daemon/nodetaint"
)

// taintPart removes the node's startup taint once the agent is ready:
// entry installed, caches synced, socket serving (in Kubernetes only;
// standalone there is no node object), and only while the chart's admission
// policy is in force (nodetaint's fence check).
type taintPart struct {
	basePart
	remover *nodetaint.Remover
}

func (a *agent) buildTaint() error {
	if a.k == nil || a.cfg.startupTaint == "" {
		return nil
	}
	r := &nodetaint.Remover{Client: a.k.client, Node: a.cfg.nodeName, Key: a.cfg.startupTaint, Ready: a.checks.Ready,
		Log: a.log.With("component", "startup-taint"), Poll: 100 * time.Millisecond, MaxBackoff: 30 * time.Second}
	a.parts = append(a.parts, &taintPart{remover: r})
	return nil
}

func (p *taintPart) serving(ctx context.Context, _ func(error)) { go p.remover.Run(ctx) }

func (p *taintPart) metrics(m *metrics.Metrics) {
	m.Bool("startup_taint_unfenced", "1 when the agent's last check found the startup-taint admission policy not in force "+
		"(a dry run of a change it forbids was admitted): the agent keeps its node's startup taint while so.", p.remover.Unfenced)
}
