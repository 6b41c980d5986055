package main

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"
)

const (
	defaultSocket  = "/var/run/sluice/agent.sock"
	defaultTimeout = 2 * time.Second
	// A kubelet's CRI runtime timeout is minutes; far sooner than that the
	// runtime should learn the agent is not answering and retry the pod.
	maxTimeout = 60 * time.Second
)

// NetConf is the sluice entry of a conflist.
type NetConf struct {
	types.PluginConf
	// Socket is the agent's gRPC unix socket.
	Socket string `json:"socket,omitempty"`
	// Timeout bounds each call to the agent, e.g. "2s".
	Timeout string `json:"timeout,omitempty"`
	// LogLevel is the plugin's own stderr level: debug, info, warn, error.
	LogLevel string `json:"logLevel,omitempty"`
	// ExcludeNamespaces are never sent to the agent, so pods the cluster
	// needs to boot (DNS, the primary CNI) start while the agent is down.
	ExcludeNamespaces []string `json:"excludeNamespaces,omitempty"`

	timeout  time.Duration
	logLevel slog.Level
	// raw is the entry as received, without prevResult, for the agent's logs.
	raw []byte
	// warnings are sent to the agent, which logs them where operators look.
	warnings []string
}

// knownKeys are the entry's keys the plugin or the CNI spec define; any
// other is most likely a typo an operator wants to hear about.
var knownKeys = map[string]bool{
	"cniVersion": true, "name": true, "type": true, "socket": true, "timeout": true, "logLevel": true,
	"excludeNamespaces": true, "prevResult": true, "capabilities": true, "runtimeConfig": true,
	"args": true, "ipam": true, "dns": true, "cni.dev/valid-attachments": true,
}

// parseConfig decodes and validates stdin. prevResult, when present, is
// parsed and converted to the current result type.
func parseConfig(stdin []byte) (*NetConf, error) {
	conf := &NetConf{}
	if err := json.Unmarshal(stdin, conf); err != nil {
		return nil, fmt.Errorf("failed to parse network configuration: %w", err)
	}
	if conf.Socket == "" {
		conf.Socket = defaultSocket
	}
	if !filepath.IsAbs(conf.Socket) {
		return nil, fmt.Errorf("socket %q: must be an absolute path", conf.Socket)
	}
	conf.timeout = defaultTimeout
	if conf.Timeout != "" {
		d, err := time.ParseDuration(conf.Timeout)
		if err != nil {
			return nil, fmt.Errorf("timeout %q: %w", conf.Timeout, err)
		}
		if d <= 0 || d > maxTimeout {
			return nil, fmt.Errorf("timeout %q: must be in (0, %s]", conf.Timeout, maxTimeout)
		}
		conf.timeout = d
	}
	if conf.LogLevel != "" {
		if err := conf.logLevel.UnmarshalText([]byte(conf.LogLevel)); err != nil {
			return nil, fmt.Errorf("logLevel %q: %w", conf.LogLevel, err)
		}
	} else {
		conf.logLevel = slog.LevelWarn
	}
	if conf.RawPrevResult != nil {
		if err := version.ParsePrevResult(&conf.PluginConf); err != nil {
			return nil, fmt.Errorf("failed to parse prevResult: %w", err)
		}
		res, err := current.NewResultFromResult(conf.PrevResult)
		if err != nil {
			return nil, fmt.Errorf("failed to convert prevResult: %w", err)
		}
		conf.PrevResult = res
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(stdin, &m); err != nil {
		return nil, fmt.Errorf("failed to parse network configuration: %w", err)
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if !knownKeys[k] {
			conf.warnings = append(conf.warnings, fmt.Sprintf("unknown key %q in the sluice conflist entry", k))
		}
	}
	if r, ok := conf.PrevResult.(*current.Result); ok && len(r.IPs) == 0 {
		conf.warnings = append(conf.warnings, "prevResult has no IPs: the primary CNI assigned none")
	}
	// The agent wants the plugin's settings, not a copy of the previous
	// plugin's output.
	delete(m, "prevResult")
	raw, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("re-encode network configuration: %w", err)
	}
	conf.raw = raw
	return conf, nil
}

func (c *NetConf) excluded(namespace string) bool {
	return namespace != "" && slices.Contains(c.ExcludeNamespaces, namespace)
}

// podArgs are the Kubernetes keys a runtime puts in CNI_ARGS.
type podArgs struct {
	Namespace, Name, UID, InfraContainerID string
}

// parseArgs reads CNI_ARGS ("K1=V1;K2=V2"). Unknown keys are ignored, as
// runtimes add their own; a malformed pair is an error.
func parseArgs(s string) (podArgs, error) {
	var a podArgs
	if s == "" {
		return a, nil
	}
	for _, pair := range strings.Split(s, ";") {
		if pair == "" {
			continue
		}
		k, v, ok := strings.Cut(pair, "=")
		if !ok || k == "" {
			return podArgs{}, fmt.Errorf("CNI_ARGS: malformed pair %q", pair)
		}
		switch k {
		case "K8S_POD_NAMESPACE":
			a.Namespace = v
		case "K8S_POD_NAME":
			a.Name = v
		case "K8S_POD_UID":
			a.UID = v
		case "K8S_POD_INFRA_CONTAINER_ID":
			a.InfraContainerID = v
		}
	}
	return a, nil
}
