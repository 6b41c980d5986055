package nri_test

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/sluicemesh/sluice/test/harness/containerdtest"
)

// containerdConfig is a version 3 config for containerd 2.x. Every path is
// the node's: its root in the test dir, its state and sockets in the
// node's private /run. Plugins that would touch the machine's own paths or
// cannot work here are off.
const containerdConfig = `version = 3
root = %[1]q
state = "/run/containerd/state"
disabled_plugins = [
  "io.containerd.internal.v1.opt",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.erofs",
  "io.containerd.tracing.processor.v1.otlp",
]

[grpc]
  address = "/run/containerd/containerd.sock"

[ttrpc]
  address = "/run/containerd/containerd.sock.ttrpc"

[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = %[2]q

[plugins.'io.containerd.cri.v1.runtime']
  # This VM's root lacks CAP_SYS_RESOURCE: never lower a child's oom_score_adj.
  restrict_oom_score_adj = true
  enable_selinux = false
  disable_apparmor = true
  netns_mounts_under_state_dir = false
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        Root = "/run/containerd/runc"
        SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = [%[3]s]
    conf_dir = %[4]q

[plugins.'io.containerd.grpc.v1.cri']
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"

[plugins.'io.containerd.nri.v1.nri']
  disable = false
  socket_path = %[5]q
  plugin_path = %[6]q
  plugin_config_path = %[7]q
  plugin_registration_timeout = "5s"
  plugin_request_timeout = "2s"
%[8]s`

// validatorConfig makes the sluice plugin required: containers of every
// pod are refused while it is not connected, but for pods annotated to
// tolerate that (the agent's own, static pods).
const validatorConfig = `  [plugins.'io.containerd.nri.v1.nri'.default_validator]
    enable = true
    required_plugins = ["sluice"]
    tolerate_missing_plugins_annotation = "sluice.dev/tolerate-missing-nri"
`

// nriSocket is the runtime's NRI socket in the node.
const nriSocket = "/run/nri/nri.sock"

// podSubnet is the primary CNI's pod range; the bridge lives in the node.
const podSubnet = "10.89.0.0/24"

// containerd is the node's containerd (containerdtest) and the node it
// runs in, for the pod configs.
type containerd struct {
	*containerdtest.Containerd
	n   *node
	bin string // the containerd binaries, crictl among them
}

type containerdOptions struct {
	validator bool // required_plugins = ["sluice"]
	// chained puts a sluice entry last in the primary conflist and the
	// plugin binary in the node's CNI bin dir: the cni trigger.
	chained bool
}

// startContainerd writes the node's primary CNI config (bridge +
// host-local, no sluice entry) and runs containerd in the node until the
// test ends, then removes every pod and kills every process left in the
// node's mount namespace (shims and pause processes daemonize).
func (n *node) startContainerd(opts containerdOptions) *containerd {
	t := n.t
	t.Helper()
	c := &containerd{n: n, bin: containerdBinaries(t)}
	confDir := n.ConfDir
	entry := ""
	binDirs := fmt.Sprintf("%q", cniPlugins(t))
	if opts.chained {
		entry = fmt.Sprintf(`, {"type": "sluice", "socket": %q, "timeout": "2s"}`, n.Socket)
		bin := n.CNIBin
		if err := copyFile(pluginBinary(t), filepath.Join(bin, "sluice")); err != nil {
			t.Fatal(err)
		}
		binDirs += fmt.Sprintf(", %q", bin)
	}
	primary := fmt.Sprintf(`{"cniVersion": "1.0.0", "name": "pods", "plugins": [
  {"type": "bridge", "bridge": "nri0", "isGateway": true, "ipMasq": false,
   "ipam": {"type": "host-local", "dataDir": %q, "ranges": [[{"subnet": %q}]],
            "routes": [{"dst": "0.0.0.0/0"}]}}%s]}`, filepath.Join(n.Dir, "ipam"), podSubnet, entry)
	if err := os.WriteFile(filepath.Join(confDir, "10-pods.conflist"), []byte(primary), 0o644); err != nil {
		t.Fatal(err)
	}
	extra := ""
	if opts.validator {
		extra = validatorConfig
	}
	conf := fmt.Sprintf(containerdConfig, filepath.Join(n.Dir, "root"), pauseRef, binDirs, confDir,
		nriSocket, filepath.Join(n.Dir, "nri", "plugins"), filepath.Join(n.Dir, "nri", "conf.d"), extra)
	c.Containerd = containerdtest.Start(t, containerdtest.Options{
		Dir: n.Dir, Config: conf, Bin: c.bin, Crictl: filepath.Join(c.bin, "crictl"),
		Socket: "/run/containerd/containerd.sock", Command: n.Command, Pause: pauseArchive(t),
		Reap: n.KillAll,
	})
	return c
}

func copyFile(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, b, 0o755)
}
