package containerdtest

import (
	"fmt"
	"strings"

	"github.com/sluicemesh/sluice/internal/ociimage"
)

// Config is a containerd config with the CRI plugin that keeps to its own
// paths: plugins that would touch the machine's (/opt/containerd) or cannot
// work in a test node are off, the pause image is the project's, runc uses
// cgroupfs, and this machine's root, which lacks CAP_SYS_RESOURCE, never
// lowers a child's oom_score_adj. test/e2e, test/nri and the test cluster's
// nodes (nodetest) all run this one.
type Config struct {
	// V2 writes containerd 1.x's version 2 format; otherwise version 3,
	// for containerd 2.x.
	V2          bool
	Root, State string
	// Socket is the gRPC address; ttrpc listens at Socket + ".ttrpc".
	Socket     string
	RuncRoot   string
	CNIBinDirs []string // version 2 takes one
	CNIConfDir string
	// NRI, when set, turns on containerd 2.x's NRI.
	NRI *NRI
}

// NRI is containerd's NRI: its socket and plugin dirs.
type NRI struct {
	Socket, PluginPath, PluginConfigPath string
}

// String renders the config.
func (c Config) String() string {
	if c.V2 {
		return fmt.Sprintf(configV2, c.Root, c.State, c.Socket, c.Socket+".ttrpc", ociimage.PauseRef,
			c.RuncRoot, c.CNIBinDirs[0], c.CNIConfDir)
	}
	bins := make([]string, len(c.CNIBinDirs))
	for i, d := range c.CNIBinDirs {
		bins[i] = fmt.Sprintf("%q", d)
	}
	s := fmt.Sprintf(configV3, c.Root, c.State, c.Socket, c.Socket+".ttrpc", ociimage.PauseRef,
		c.RuncRoot, strings.Join(bins, ", "), c.CNIConfDir)
	if c.NRI != nil {
		s += fmt.Sprintf(nriSection, c.NRI.Socket, c.NRI.PluginPath, c.NRI.PluginConfigPath)
	}
	return s
}

// ValidatorHeader starts the NRI validator's section, the config's last.
const ValidatorHeader = "  [plugins.'io.containerd.nri.v1.nri'.default_validator]"

// NRIValidator is the section, appended to a config with NRI, that makes
// plugin required: every container is refused while it is not connected,
// but for pods annotated tolerate (the agent's own, static pods).
func NRIValidator(plugin, tolerate string) string {
	return fmt.Sprintf(ValidatorHeader+`
    enable = true
    required_plugins = [%q]
    tolerate_missing_plugins_annotation = %q
`, plugin, tolerate)
}

// configV3 is containerd 2.x's version 3 config.
const configV3 = `version = 3
root = %[1]q
state = %[2]q
disabled_plugins = [
  "io.containerd.internal.v1.opt",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.erofs",
  "io.containerd.tracing.processor.v1.otlp",
]

[grpc]
  address = %[3]q

[ttrpc]
  address = %[4]q

[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    # The only place the pause image is set: kubelet 1.37 has no flag for it.
    sandbox = %[5]q

[plugins.'io.containerd.cri.v1.runtime']
  restrict_oom_score_adj = true
  enable_selinux = false
  disable_apparmor = true
  # Pod netns mounts in /var/run/netns, where the agent's chart looks.
  netns_mounts_under_state_dir = false
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        Root = %[6]q
        SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = [%[7]s]
    conf_dir = %[8]q
    max_conf_num = 1

[plugins.'io.containerd.grpc.v1.cri']
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
`

// configV2 is the same for containerd 1.x.
const configV2 = `version = 2
root = %[1]q
state = %[2]q
disabled_plugins = [
  "io.containerd.internal.v1.opt",
  "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.zfs",
  "io.containerd.tracing.processor.v1.otlp",
]

[grpc]
  address = %[3]q

[ttrpc]
  address = %[4]q

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %[5]q
  restrict_oom_score_adj = true
  disable_apparmor = true
  enable_selinux = false
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"

  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"

    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"

      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        Root = %[6]q
        SystemdCgroup = false

  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %[7]q
    conf_dir = %[8]q
    max_conf_num = 1
`

// nriSection turns on NRI with its socket and plugin dirs the node's own
// (not the machine's /opt/nri and /etc/nri); its timeouts are NRI's
// defaults (registration 5 s, a request 2 s).
const nriSection = `
[plugins.'io.containerd.nri.v1.nri']
  disable = false
  socket_path = %q
  plugin_path = %q
  plugin_config_path = %q
`
