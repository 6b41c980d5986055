package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/sluicemesh/sluice/daemon/cleanup"
)

// runCleanup is `sluice-agent cleanup [agent flags]`: with the agent
// stopped, daemon/cleanup removes what the agent put on the node, found
// through the same flags.
func runCleanup(args []string, getenv func(string) string, errOut io.Writer) int {
	cfg, err := parseConfig(args, getenv, errOut)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(errOut, "sluice-agent cleanup: %v (see sluice-agent --help)\n", err)
		return 2
	}
	log, err := cfg.logger(errOut)
	if err != nil {
		fmt.Fprintf(errOut, "sluice-agent cleanup: %v\n", err)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := runCleanupWith(ctx, cfg, log); err != nil {
		fmt.Fprintf(errOut, "sluice-agent cleanup: %v\n", err)
		return 1
	}
	return 0
}

// cleanupConfig is cleanup's half of the flags.
func (c *config) cleanupConfig(log *slog.Logger) (cleanup.Config, error) {
	cc := cleanup.Config{StateDir: c.stateDir, NetnsRoots: splitList(c.netnsRoots), HostProc: c.hostProc, HostNetns: c.hostNetns,
		Socket: c.socket, ZtunnelSocket: c.ztunnelSocket, Log: log}
	if c.install {
		ic, err := c.installerConfig(log)
		if err != nil {
			return cleanup.Config{}, err
		}
		cc.Installer = &ic
	}
	return cc, nil
}

// runCleanupWith runs cleanup with the agent's flags.
func runCleanupWith(ctx context.Context, cfg *config, log *slog.Logger) error {
	cc, err := cfg.cleanupConfig(log)
	if err != nil {
		return err
	}
	return cleanup.Run(ctx, cc)
}
