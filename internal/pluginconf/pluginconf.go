// Package pluginconf is the sluice entry of a CNI conflist: its keys, their
// defaults and their limits. The plugin parses the entry with it and the
// agent validates its flags with it before writing the entry, so the agent
// can never install an entry the plugin refuses. It imports only the
// standard library: the plugin runs on every pod start and stays thin.
package pluginconf

import (
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"
)

const (
	// DefaultSocket is the agent's gRPC socket when the entry names none.
	DefaultSocket = "/var/run/sluice/agent.sock"
	// DefaultTimeout bounds each plugin call when the entry sets none.
	DefaultTimeout = 10 * time.Second
	// MaxTimeout caps each call: a kubelet's CRI timeout is minutes, and far
	// sooner than that the runtime should learn the agent is not answering
	// and retry the pod.
	MaxTimeout = 60 * time.Second
	// MaxRequestBytes bounds one request from plugin to agent: a CNI
	// request is a few KiB. The agent refuses more; the plugin does not
	// send more, and says why (a config or prevResult that large is
	// invalid, not worth a retry).
	MaxRequestBytes = 1 << 20
	// DefaultLogLevel is the plugin's stderr level when the entry sets none.
	DefaultLogLevel = slog.LevelWarn
	// StatusConfig makes CNI STATUS report only what the plugin itself
	// needs: its entry parses. The agent being away does not make the
	// node's network not ready (ADD fails closed on its own), so an agent
	// outage never turns the node NotReady and never drains it.
	StatusConfig = "config"
	// StatusAgent makes STATUS ask the agent too: code 50 while it is not
	// ready or cannot be reached. With containerd 2.x and a conflist at
	// cniVersion 1.1.0 that marks the node NotReady during an agent outage.
	StatusAgent = "agent"
	// DefaultStatus is what STATUS reports when the entry sets nothing.
	DefaultStatus = StatusConfig
	// maxSocketPath is sun_path (108 bytes) less its terminating NUL: a
	// longer path cannot be dialled or listened on at all.
	maxSocketPath = 107
)

// Settings are the sluice keys of the entry as they appear in the file.
type Settings struct {
	// Socket is the agent's gRPC unix socket.
	Socket string `json:"socket,omitempty"`
	// Timeout bounds each call to the agent, e.g. "2s".
	Timeout string `json:"timeout,omitempty"`
	// LogLevel is the plugin's own stderr level: debug, info, warn, error.
	LogLevel string `json:"logLevel,omitempty"`
	// ExcludeNamespaces are never sent to the agent, so pods the cluster
	// needs to boot (DNS, the primary CNI) start while the agent is down.
	ExcludeNamespaces []string `json:"excludeNamespaces,omitempty"`
	// Status is what CNI STATUS reports: config or agent.
	Status string `json:"status,omitempty"`
}

// Parsed is Settings checked, with defaults filled in.
type Parsed struct {
	Socket            string
	Timeout           time.Duration
	LogLevel          slog.Level
	ExcludeNamespaces []string
	Status            string
}

// Parse checks every key and fills in defaults; the error names each key
// that is wrong.
func (s Settings) Parse() (Parsed, error) {
	p := Parsed{Socket: s.Socket, Timeout: DefaultTimeout, LogLevel: DefaultLogLevel, ExcludeNamespaces: s.ExcludeNamespaces, Status: s.Status}
	if p.Socket == "" {
		p.Socket = DefaultSocket
	}
	if p.Status == "" {
		p.Status = DefaultStatus
	}
	var errs []error
	if err := CheckStatus(p.Status); err != nil {
		errs = append(errs, fmt.Errorf("status %q: %w", p.Status, err))
	}
	if err := CheckSocket(p.Socket); err != nil {
		errs = append(errs, fmt.Errorf("socket %q: %w", p.Socket, err))
	}
	if s.Timeout != "" {
		d, err := time.ParseDuration(s.Timeout)
		if err == nil {
			err = CheckTimeout(d)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("timeout %q: %w", s.Timeout, err))
		}
		p.Timeout = d
	}
	if s.LogLevel != "" {
		if err := p.LogLevel.UnmarshalText([]byte(s.LogLevel)); err != nil {
			errs = append(errs, fmt.Errorf("logLevel %q: %w", s.LogLevel, err))
		}
	}
	return p, errors.Join(errs...)
}

// CheckSocket is the rule for the agent's socket path: absolute (the plugin
// runs in whatever directory the runtime chose) and short enough to fit a
// unix socket address.
func CheckSocket(path string) error {
	if !filepath.IsAbs(path) {
		return errors.New("must be an absolute path")
	}
	if len(path) > maxSocketPath {
		return fmt.Errorf("longer than the %d bytes a unix socket path can hold", maxSocketPath)
	}
	return nil
}

// CheckTimeout is the rule for the plugin's per-call deadline.
func CheckTimeout(d time.Duration) error {
	if d <= 0 || d > MaxTimeout {
		return fmt.Errorf("must be in (0, %s]", MaxTimeout)
	}
	return nil
}

// CheckStatus is the rule for what STATUS reports.
func CheckStatus(s string) error {
	if s != StatusConfig && s != StatusAgent {
		return fmt.Errorf("must be %s or %s", StatusConfig, StatusAgent)
	}
	return nil
}

// Map is s as the installer's PluginConfig: the keys it writes, with
// empty ones left out as the file would leave them.
func (s Settings) Map() map[string]any {
	m := map[string]any{}
	for k, v := range map[string]string{"socket": s.Socket, "timeout": s.Timeout, "logLevel": s.LogLevel, "status": s.Status} {
		if v != "" {
			m[k] = v
		}
	}
	if len(s.ExcludeNamespaces) > 0 {
		m["excludeNamespaces"] = s.ExcludeNamespaces
	}
	return m
}
