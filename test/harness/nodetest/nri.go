package nodetest

import (
	"fmt"
	"os"
	"strings"

	"github.com/sluicemesh/sluice/test/harness/containerdtest"
)

// nriSocket is the runtime's NRI socket in the node's private /run, where
// the sluice chart's NRI trigger (hostPath /var/run/nri) finds it.
const nriSocket = "/run/nri/nri.sock"

// RequireNRIPlugin turns the node's NRI validator on for plugin (pods
// annotated tolerate may start without it), or off with plugin "". It
// rewrites the node's containerd config only: the change takes effect when
// containerd next starts (Reboot).
func (c *Cluster) RequireNRIPlugin(plugin, tolerate string) error {
	conf, err := os.ReadFile(c.path("containerd.toml"))
	if err != nil {
		return fmt.Errorf("require NRI plugin %q: %w", plugin, err)
	}
	s, _, _ := strings.Cut(string(conf), containerdtest.ValidatorHeader)
	if plugin != "" {
		if !strings.Contains(s, "[plugins.'io.containerd.nri.v1.nri']") {
			return fmt.Errorf("require NRI plugin %q: this node's containerd runs without NRI", plugin)
		}
		s += containerdtest.NRIValidator(plugin, tolerate)
	}
	if err := os.WriteFile(c.path("containerd.toml"), []byte(s), 0o644); err != nil {
		return fmt.Errorf("require NRI plugin %q: %w", plugin, err)
	}
	return nil
}
