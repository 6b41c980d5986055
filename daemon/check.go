package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"
)

// check validates the configuration without touching the node, for
// --check-config (the chart's tests run the agent with the DaemonSet's
// exact args and env through it, so chart and flags cannot drift).
func (c *config) check() error {
	var errs []error
	if _, err := c.uids(); err != nil {
		errs = append(errs, err)
	}
	if c.kubeconfig == "" {
		if _, err := staticPolicy(c); err != nil {
			errs = append(errs, err)
		}
	} else if c.kubeconfig != inCluster {
		if _, err := os.Stat(c.kubeconfig); err != nil {
			errs = append(errs, fmt.Errorf("--kubeconfig: %w", err))
		}
	}
	for flag, path := range map[string]string{
		"--socket": c.socket, "--state-dir": c.stateDir, "--host-proc": c.hostProc,
		"--cni-conf-dir": c.cniConfDir, "--ztunnel-socket": c.ztunnelSocket,
	} {
		if !filepath.IsAbs(path) {
			errs = append(errs, fmt.Errorf("%s %q: not an absolute path", flag, path))
		}
	}
	for flag, list := range map[string]string{"--netns-roots": c.netnsRoots, "--cni-bin-dir": c.cniBinDirs} {
		for _, p := range splitList(list) {
			if !filepath.IsAbs(p) {
				errs = append(errs, fmt.Errorf("%s: %q is not an absolute path", flag, p))
			}
		}
	}
	for flag, path := range map[string]string{"--plugin-binary": c.pluginBinary, "--host-netns": c.hostNetns} {
		if path != "" && !filepath.IsAbs(path) {
			errs = append(errs, fmt.Errorf("%s %q: not an absolute path", flag, path))
		}
	}
	if _, _, err := net.SplitHostPort(c.healthAddr); err != nil {
		errs = append(errs, fmt.Errorf("--health-addr: %w", err))
	}
	if c.pluginTimeout <= 0 || c.pluginTimeout > 60*time.Second {
		errs = append(errs, fmt.Errorf("--plugin-timeout %s: must be in (0, 60s]", c.pluginTimeout))
	}
	return errors.Join(errs...)
}
