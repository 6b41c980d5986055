package main

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/sluicemesh/sluice/internal/pluginconf"
)

// NetConf is the sluice entry of a conflist. Its sluice keys, their
// defaults and limits live in pluginconf, which the agent checks its flags
// with before it writes the entry.
type NetConf struct {
	types.PluginConf
	pluginconf.Settings

	parsed pluginconf.Parsed
	// raw is the entry as received, without prevResult, for the agent's logs.
	raw []byte
	// warnings are sent to the agent, which logs them where operators look.
	warnings []string
}

// knownKeys are the entry's keys the plugin or the CNI spec define; any
// other is most likely a typo an operator wants to hear about.
var knownKeys = map[string]bool{
	"cniVersion": true, "name": true, "type": true, "socket": true, "timeout": true, "logLevel": true,
	"excludeNamespaces": true, "status": true, "prevResult": true, "capabilities": true, "runtimeConfig": true,
	"args": true, "ipam": true, "dns": true, "cni.dev/valid-attachments": true,
	// libcni's GC also sends the key under the name the spec first gave it
	// (containernetworking/cni#1101).
	"cni.dev/attachments": true,
}

// parseConfig decodes and validates stdin. prevResult, when present, is
// parsed and converted to the current result type, unless the verb has no
// use for it (withPrev false: DEL, STATUS, GC), which then cannot fail on it.
func parseConfig(stdin []byte, withPrev bool) (*NetConf, error) {
	conf := &NetConf{}
	if err := json.Unmarshal(stdin, conf); err != nil {
		return nil, fmt.Errorf("failed to parse network configuration: %w", err)
	}
	parsed, err := conf.Settings.Parse()
	if err != nil {
		return nil, err
	}
	conf.parsed = parsed
	if conf.RawPrevResult != nil && withPrev {
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
	return namespace != "" && slices.Contains(c.parsed.ExcludeNamespaces, namespace)
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
