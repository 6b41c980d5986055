package installer

import (
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"regexp"
	"slices"
	"time"

	"github.com/sluicemesh/sluice/installer/conflist"
)

// OwnConfName is the conflist written in non-chained mode. It sorts after
// the configs CNIs ship (05-cilium, 10-calico, 99-loopback...), as Istio's
// YYY-istio-cni does: runtimes use the lexically first config, which stays
// the primary CNI's, and Multus finds this one by its network name.
const OwnConfName = "YYY-sluice.conflist"

// legacyOwnConfName is what earlier versions wrote in non-chained mode; it
// sorts first, so it is removed wherever it is found.
const legacyOwnConfName = "00-sluice.conflist"

// DefaultResyncInterval is the safety net behind fsnotify: a missed event
// is repaired no later than this.
const DefaultResyncInterval = 10 * time.Second

// Config says what to keep in place and where.
type Config struct {
	// BinDirs get a copy of PluginBinary named "sluice" each (runtimes
	// differ: /opt/cni/bin, /usr/libexec/cni, /home/kubernetes/bin).
	BinDirs []string
	// ConfDir holds the CNI configs the runtime reads (/etc/cni/net.d).
	ConfDir string
	// ConfName is the primary config file in ConfDir to chain into. Empty
	// means the lexically first valid .conf/.conflist/.json that is not
	// OwnConfName, which is the file runtimes use. Unused when not Chained.
	ConfName string
	// Chained keeps "<stem>-sluice.conflist", the primary's network with
	// the sluice entry last, sorting just before the primary, which is
	// never edited. Otherwise the installer writes OwnConfName holding only
	// the sluice plugin and leaves every other file alone.
	Chained bool
	// NetworkName is the network name of OwnConfName (non-chained mode),
	// which Multus matches against a NetworkAttachmentDefinition's name
	// when the NAD carries no config of its own; empty means "sluice".
	NetworkName string
	// PluginBinary is the file copied into BinDirs.
	PluginBinary string
	// PluginConfig holds the keys of our entry besides "type": "sluice".
	PluginConfig map[string]any
	// RemoveIstioCNIEntry removes a leftover "type": "istio-cni" entry from
	// the primary conflist (a migration from istio-cni); otherwise it is
	// left in place with a warning.
	RemoveIstioCNIEntry bool
	// ResyncInterval re-checks everything even without events; zero means
	// DefaultResyncInterval.
	ResyncInterval time.Duration
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// OnChange, when set, is called with every readiness change, from the
	// installer's goroutine; it must not block.
	OnChange func(ready bool, reason string)
}

func (c Config) withDefaults() Config {
	if c.NetworkName == "" {
		c.NetworkName = conflist.PluginType
	}
	if c.ResyncInterval == 0 {
		c.ResyncInterval = DefaultResyncInterval
	}
	c.ConfDir = filepath.Clean(c.ConfDir)
	c.BinDirs = slices.Clone(c.BinDirs)
	for i, d := range c.BinDirs {
		c.BinDirs[i] = filepath.Clean(d)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// networkName is the CNI spec's rule for a network name.
var networkName = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.\-]*$`)

// Validate checks cfg as New does, without touching the node or reading
// the plugin binary, so the agent's --check-config runs the same rules.
func (c Config) Validate() error {
	return c.withDefaults().validate()
}

func (c Config) validate() error {
	var errs []error
	if !networkName.MatchString(c.NetworkName) {
		errs = append(errs, fmt.Errorf("network name %q: want letters, digits, '_', '.' and '-', starting with a letter or digit", c.NetworkName))
	}
	if len(c.BinDirs) == 0 {
		errs = append(errs, errors.New("no plugin binary directory"))
	}
	for _, d := range c.BinDirs {
		if !filepath.IsAbs(d) {
			errs = append(errs, fmt.Errorf("plugin binary directory %q is not absolute", d))
		}
	}
	if !filepath.IsAbs(c.ConfDir) {
		errs = append(errs, fmt.Errorf("CNI config directory %q is not absolute", c.ConfDir))
	}
	if c.ConfName != "" && (filepath.Base(c.ConfName) != c.ConfName || !isConfFile(c.ConfName)) {
		errs = append(errs, fmt.Errorf("primary config name %q is not a .conf, .conflist or .json file name", c.ConfName))
	}
	if c.Chained && c.ConfName != "" && ours(c.ConfName) {
		errs = append(errs, fmt.Errorf("primary config name %q is the installer's own file", c.ConfName))
	}
	if c.PluginBinary == "" {
		errs = append(errs, errors.New("no plugin binary to install"))
	}
	if c.ResyncInterval < 0 {
		errs = append(errs, fmt.Errorf("negative resync interval %s", c.ResyncInterval))
	}
	return errors.Join(errs...)
}

// isConfFile reports whether a runtime would read name as a CNI config, the
// same extensions libcni and containerd use.
func isConfFile(name string) bool {
	switch filepath.Ext(name) {
	case ".conf", ".conflist", ".json":
		return true
	}
	return false
}
