package main

import (
	"context"
	"log/slog"

	"github.com/sluicemesh/sluice/daemon/nri"
)

// nriPart connects the agent to the runtime as an NRI plugin whose pod
// events go through the CNI service, the same path as the plugin's calls.
// Readiness waits for the connection.
type nriPart struct {
	basePart
	plugin *nri.Plugin
	socket string
}

func (a *agent) buildNRI() error {
	if a.cfg.trigger == triggerCNI {
		return nil
	}
	var onConnected func(string)
	if a.cfg.trigger == triggerNRI && a.cfg.install {
		onConnected = func(runtime string) { dropConflistEntry(a.cfg, runtime, a.log) }
	}
	p := nri.New(a.cni, a.store, a.log.With("component", "nri"), onConnected)
	a.checks.Add("nri", p.Ready)
	a.parts = append(a.parts, &nriPart{plugin: p, socket: a.cfg.nriSocket})
	return nil
}

func (p *nriPart) start(ctx context.Context, _ func(error)) error {
	go func() {
		_ = p.plugin.Run(ctx, p.socket) // returns only when ctx ends
	}()
	return nil
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
