// Command sluice-agent is the privileged node daemon of sluice: it serves
// the plugin's gRPC API, owns every pod's capture rules and keeps the
// plugin installed. This file is dispatch, flags and signals; agent.go
// builds and runs the process.
//
// newAgent builds the process in dependency order and assigns nothing
// after. The parts a configuration may leave out (Kubernetes policy with
// its informers, the ambient node, the installer, the running-pod checks,
// NRI, the startup taint) are each a part (parts.go): start before the
// socket serves, serving after, metrics, leavesState, and stop before and
// after the drain. run and registerMetrics walk the list in build order,
// shutdown in reverse (a failed start stops what started, in reverse), so
// the order that keeps pods safe (the conflist entry out before the drain,
// the host table out after it, the ZDS socket waited for) lives in one
// place. The store and the ZDS server need each other:
// the store hands pods to ztunnel and ztunnel's snapshot reads the store,
// so buildAmbient late-binds the snapshot func, read only once ZDS serves,
// after the journal is loaded. The start-up reconcile runs before the
// socket serves, with max(4, 2×NumCPU) workers.
//
// The commands have rooms of their own: the operator CLI (daemon/cli),
// `sluice-agent cleanup` (daemon/cleanup; cleanup.go hands it the flags)
// and `sluice-agent migrate-values` (daemon/istiovalues). On SIGTERM the
// entry leaves when the API says sluice is leaving the node: access lost
// (an uninstall deleted the ServiceAccount) or a DaemonSet whose
// nodeSelector or required affinity no longer selects the node
// (component-helpers' nodeaffinity, nodes: get); a node that cannot be
// read keeps the entry.
//
// check (so --check-config too) refuses, one line each, what would start
// an agent that cannot serve: --allowed-uids without 0, an empty
// --netns-roots, --ztunnel-socket equal to --socket with --ambient. A
// listen address is checked as the listener would take it (checkHostPort):
// the host an IP or empty, the port a number up to 65535, port 0 accepted
// (the kernel picks one); every unix socket path takes
// pluginconf.CheckSocket (sun_path's length).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/sluicemesh/sluice/daemon/cli"
	"github.com/sluicemesh/sluice/daemon/istiovalues"
	"github.com/sluicemesh/sluice/internal/buildinfo"
)

func main() {
	if cli.IsCommand(os.Args[1:]) {
		os.Exit(cli.Run(os.Args[1:], os.Getenv, os.Stdout, os.Stderr, agentFlags))
	}
	if len(os.Args) > 1 && os.Args[1] == "cleanup" {
		os.Exit(runCleanup(os.Args[2:], os.Getenv, os.Stderr))
	}
	if len(os.Args) > 1 && os.Args[1] == "migrate-values" {
		os.Exit(istiovalues.Command(os.Args[2:], os.Stdin, os.Stdout, os.Stderr))
	}
	if isVersionFlag(os.Args[1:]) {
		fmt.Println("sluice-agent", buildinfo.Version)
		return
	}
	// parseConfig validates every flag (config.check): the one path that
	// --check-config and a real start share.
	cfg, err := parseConfig(os.Args[1:], os.Getenv, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "sluice-agent: %v (see sluice-agent --help)\n", err)
		os.Exit(2)
	}
	log, err := cfg.logger(os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "sluice-agent:", err)
		os.Exit(2)
	}
	if cfg.checkConfig {
		fmt.Println("config ok")
		return
	}
	setGC(os.Getenv)
	sig, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	a, err := newAgent(cfg, log)
	if err == nil {
		err = a.run(sig)
	}
	if err == nil && a.left && cfg.cleanupOnUninstall {
		// After run: its lock on the state dir is released.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		err = runCleanupWith(ctx, cfg, log)
		cancel()
	}
	if err != nil {
		log.Error("exiting", "err", err)
		os.Exit(1)
	}
}

// isVersionFlag is `sluice-agent --version` alone: it prints and exits
// before any flag or env var is read, so it works in any environment.
func isVersionFlag(args []string) bool {
	return len(args) == 1 && (args[0] == "--version" || args[0] == "-version")
}
