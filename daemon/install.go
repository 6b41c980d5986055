package main

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

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
