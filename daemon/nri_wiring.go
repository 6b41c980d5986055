package main

import (
	"context"
	"log/slog"

	"github.com/sluicemesh/sluice/daemon/health"
	"github.com/sluicemesh/sluice/daemon/nri"
	"github.com/sluicemesh/sluice/daemon/rpc"
	"github.com/sluicemesh/sluice/daemon/workloads"
)

// startNRI connects the agent to the runtime as an NRI plugin whose pod
// events go through cni, the same path as the plugin's calls. Readiness
// waits for the connection.
func startNRI(ctx context.Context, cfg *config, cni *rpc.CNI, store *workloads.Store, checks *health.Checks, log *slog.Logger) {
	p := nri.New(cni, store, log.With("component", "nri"))
	checks.Add("nri", p.Ready)
	go func() {
		_ = p.Run(ctx, cfg.nriSocket) // returns only when ctx ends
	}()
}
