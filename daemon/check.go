package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/sluicemesh/sluice/daemon/policy"
	"github.com/sluicemesh/sluice/internal/pluginconf"
)

// check validates the configuration without touching the node. parseConfig
// runs it, so the agent, --check-config (which the chart's tests run with
// the DaemonSet's exact args and env) and the plugin's entry all pass the
// same rules.
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
	if _, _, err := c.probeSNAT(); err != nil {
		errs = append(errs, err)
	}
	if _, err := policy.ParseSelectors(c.enablementSelectors()); err != nil {
		errs = append(errs, fmt.Errorf("--ambient-enablement-selectors: %w", err))
	}
	if bad := validation.IsQualifiedName(c.startupTaint); c.startupTaint != "" && len(bad) > 0 {
		errs = append(errs, fmt.Errorf("--startup-taint %q: not a taint key: %s", c.startupTaint, strings.Join(bad, "; ")))
	}
	if err := checkConditionType(c.nodeCondition); err != nil {
		errs = append(errs, err)
	}
	if c.ztunnelWait < 0 {
		errs = append(errs, fmt.Errorf("--ztunnel-connect-wait %v: negative; 0 fails at once", c.ztunnelWait))
	}
	errs = append(errs, c.checkPaths()...)
	errs = append(errs, c.checkListeners()...)
	if _, err := c.logger(io.Discard); err != nil {
		errs = append(errs, err)
	}
	if c.install {
		if ic, err := c.installerConfig(nil); err != nil {
			errs = append(errs, err)
		} else if err := ic.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("installer flags: %w", err))
		}
	}
	return errors.Join(append(errs, c.checkPluginEntry())...)
}

// checkPaths checks the flags that name files and directories: a relative
// path would resolve against the agent's working directory, which is not
// the node's root.
func (c *config) checkPaths() []error {
	var errs []error
	// Slices, not maps: the errors come out in the same order every run.
	for _, f := range []flagValue{
		{"--state-dir", c.stateDir}, {"--host-proc", c.hostProc},
		{"--cni-conf-dir", c.cniConfDir}, {"--ztunnel-socket", c.ztunnelSocket},
	} {
		if !filepath.IsAbs(f.value) {
			errs = append(errs, fmt.Errorf("%s %q: not an absolute path", f.flag, f.value))
		}
	}
	for _, f := range []flagValue{{"--netns-roots", c.netnsRoots}, {"--cni-bin-dir", c.cniBinDirs}} {
		for _, p := range splitList(f.value) {
			if !filepath.IsAbs(p) {
				errs = append(errs, fmt.Errorf("%s: %q is not an absolute path", f.flag, p))
			}
		}
	}
	if len(splitList(c.netnsRoots)) == 0 {
		errs = append(errs, errors.New("--netns-roots: empty; no pod netns could be opened"))
	}
	if c.ambient && filepath.Clean(c.ztunnelSocket) == filepath.Clean(c.socket) {
		errs = append(errs, fmt.Errorf("--ztunnel-socket %q: the agent's own --socket; ztunnel and the plugin need one each", c.ztunnelSocket))
	}
	for _, f := range []flagValue{{"--plugin-binary", c.pluginBinary}, {"--host-netns", c.hostNetns}} {
		if f.value != "" && !filepath.IsAbs(f.value) {
			errs = append(errs, fmt.Errorf("%s %q: not an absolute path", f.flag, f.value))
		}
	}
	return errs
}

// flagValue is a flag's name and its value, for checks run over several.
type flagValue struct{ flag, value string }

// checkPluginEntry applies the plugin's own rules (pluginconf) to the
// entry the agent would write, naming the flags each key comes from.
func (c *config) checkPluginEntry() error {
	var errs []error
	if err := pluginconf.CheckSocket(c.socket); err != nil {
		errs = append(errs, fmt.Errorf("--socket %q: %w", c.socket, err))
	}
	if err := pluginconf.CheckTimeout(c.pluginTimeout); err != nil {
		errs = append(errs, fmt.Errorf("--plugin-timeout %s: %w", c.pluginTimeout, err))
	}
	if err := pluginconf.CheckStatus(c.pluginStatus); err != nil {
		errs = append(errs, fmt.Errorf("--plugin-status %q: %w", c.pluginStatus, err))
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	// Whatever the flags above miss, the whole entry as written must parse.
	if _, err := c.pluginSettings().Parse(); err != nil {
		return fmt.Errorf("the plugin would refuse the conflist entry built from --socket, --plugin-timeout and --log-level: %w", err)
	}
	return nil
}

// checkConditionType refuses a --node-condition that is not a qualified
// name with a domain prefix: unprefixed types are the kubelet's (Ready,
// MemoryPressure, ...), which the agent must never write.
func checkConditionType(t string) error {
	if t == "" {
		return nil
	}
	if bad := validation.IsQualifiedName(t); len(bad) > 0 {
		return fmt.Errorf("--node-condition %q: not a condition type: %s", t, strings.Join(bad, "; "))
	}
	if !strings.Contains(t, "/") {
		return fmt.Errorf("--node-condition %q: needs a domain prefix (e.g. sluice.dev/MeshReady): unprefixed types are the kubelet's", t)
	}
	return nil
}
