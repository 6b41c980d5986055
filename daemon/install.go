package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/sluicemesh/sluice/daemon/metrics"
	"github.com/sluicemesh/sluice/installer"
	"github.com/sluicemesh/sluice/internal/pluginconf"
)

// newInstaller maps the agent's flags onto the installer. The plugin's
// conflist entry is built from the agent's own flags, so the socket the
// plugin dials is always the one the agent serves.
func newInstaller(cfg *config, log *slog.Logger) (*installer.Installer, error) {
	ic, err := cfg.installerConfig(log)
	if err != nil {
		return nil, err
	}
	return installer.New(ic)
}

// installerConfig is the installer's half of the flags; check validates it
// with the installer's own rules.
func (c *config) installerConfig(log *slog.Logger) (installer.Config, error) {
	bin := c.pluginBinary
	if bin == "" {
		self, err := os.Executable()
		if err != nil {
			return installer.Config{}, fmt.Errorf("locate own executable for --plugin-binary: %w", err)
		}
		bin = filepath.Join(filepath.Dir(self), "sluice")
	}
	return installer.Config{
		BinDirs:             splitList(c.cniBinDirs),
		ConfDir:             c.cniConfDir,
		ConfName:            c.cniConfName,
		Chained:             c.chained,
		NetworkName:         c.cniNetworkName,
		RemoveIstioCNIEntry: c.removeIstioCNI,
		PluginBinary:        bin,
		PluginConfig:        c.pluginSettings().Map(),
		ResyncInterval:      c.resync,
		Logger:              log,
	}, nil
}

// pluginSettings is the plugin's conflist entry as the agent's flags make
// it; check validates it with the plugin's own rules.
func (c *config) pluginSettings() pluginconf.Settings {
	return pluginconf.Settings{
		Socket:            c.socket,
		Timeout:           c.pluginTimeout.String(),
		LogLevel:          c.pluginLogLevel,
		ExcludeNamespaces: splitList(c.excludeNamespaces),
		Status:            c.pluginStatus,
	}
}

// installerPart keeps the plugin installed once the socket serves, and
// takes the entry out on an uninstall, before the drain: new pods should
// stop calling a leaving agent.
type installerPart struct {
	basePart
	inst *installer.Installer
	log  *slog.Logger
}

func (a *agent) buildInstaller() error {
	if !a.cfg.installs() {
		return nil
	}
	inst, err := newInstaller(a.cfg, a.log)
	if err != nil {
		return err
	}
	a.checks.Add("installer", inst.Ready)
	a.parts = append(a.parts, &installerPart{inst: inst, log: a.log})
	return nil
}

func (p *installerPart) serving(ctx context.Context, fail func(error)) {
	go func() {
		if err := p.inst.Run(ctx); err != nil {
			fail(fmt.Errorf("installer: %w", err))
		}
	}()
}

func (p *installerPart) metrics(m *metrics.Metrics) {
	m.Func("counter", "installer_writes_total", "Files the installer wrote (installs and repairs).",
		func() float64 { return float64(p.inst.Stats().Writes) })
	m.Func("counter", "installer_restores_total", "Repairs of a binary or entry someone else removed or changed.",
		func() float64 { return float64(p.inst.Stats().Restores) })
}

func (p *installerPart) leavesState() bool { return true }

func (p *installerPart) stop(leaving, drained bool) {
	if !leaving || drained {
		return
	}
	if err := p.inst.Uninstall(); err != nil {
		p.log.Error("uninstall on exit", "err", err)
	} else {
		p.log.Info("removed the sluice conflist entry")
	}
}
