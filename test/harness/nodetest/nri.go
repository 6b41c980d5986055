package nodetest

import (
	"fmt"
	"os"
	"strings"
)

// nriSocket is the runtime's NRI socket in the node's private /run, where
// the sluice chart's NRI trigger (hostPath /var/run/nri) finds it.
const nriSocket = "/run/nri/nri.sock"

// nriConfig turns on containerd 2.x's NRI, as its default does, with the
// plugin dirs in the cluster's dir instead of the machine's /opt/nri and
// /etc/nri. No plugin connects unless a test installs one (sluice with
// trigger=nri), and no validator is set: a node without an NRI plugin runs
// pods as it would with NRI off.
const nriConfig = `
[plugins.'io.containerd.nri.v1.nri']
  disable = false
  socket_path = %q
  plugin_path = %q
  plugin_config_path = %q
`

// nriValidator makes an NRI plugin required, as docs/nri.md tells an
// operator running sluice with trigger=nri to: every container is refused
// while the plugin is not connected, but for pods annotated to tolerate it
// (the agent's own).
const nriValidator = `  [plugins.'io.containerd.nri.v1.nri'.default_validator]
    enable = true
    required_plugins = [%q]
    tolerate_missing_plugins_annotation = %q
`

// RequireNRIPlugin turns the node's NRI validator on for plugin (pods
// annotated tolerate may start without it), or off with plugin "". It
// rewrites the node's containerd config only: the change takes effect when
// containerd next starts (Reboot).
func (c *Cluster) RequireNRIPlugin(plugin, tolerate string) error {
	conf, err := os.ReadFile(c.path("containerd.toml"))
	if err != nil {
		return fmt.Errorf("require NRI plugin %q: %w", plugin, err)
	}
	s, _, _ := strings.Cut(string(conf), "  [plugins.'io.containerd.nri.v1.nri'.default_validator]")
	if plugin != "" {
		if !strings.Contains(s, "[plugins.'io.containerd.nri.v1.nri']") {
			return fmt.Errorf("require NRI plugin %q: this node's containerd runs without NRI", plugin)
		}
		s += fmt.Sprintf(nriValidator, plugin, tolerate)
	}
	if err := os.WriteFile(c.path("containerd.toml"), []byte(s), 0o644); err != nil {
		return fmt.Errorf("require NRI plugin %q: %w", plugin, err)
	}
	return nil
}
