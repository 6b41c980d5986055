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
	var onConnected func(string)
	if cfg.trigger == triggerNRI && cfg.install {
		onConnected = func(runtime string) { dropConflistEntry(cfg, runtime, log) }
	}
	p := nri.New(cni, store, log.With("component", "nri"), onConnected)
	checks.Add("nri", p.Ready)
	go func() {
		_ = p.Run(ctx, cfg.nriSocket) // returns only when ctx ends
	}()
}

// dropConflistEntry removes the entry an agent with --trigger cni or both
// left in the primary conflist, once the runtime has confirmed NRI: from
// then on the entry would only call the agent a second time. A node with
// no entry is left as it is.
func dropConflistEntry(cfg *config, runtime string, log *slog.Logger) {
	inst, err := newInstaller(cfg, log.With("component", "installer"))
	if err == nil {
		err = inst.Uninstall()
	}
	if err != nil {
		log.Warn("NRI confirmed, but removing a leftover sluice conflist entry failed", "runtime", runtime, "err", err)
		return
	}
	log.Info("NRI confirmed; no sluice conflist entry is left", "runtime", runtime)
}
