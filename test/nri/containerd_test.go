package nri_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/sluicemesh/sluice/test/harness/containerdtest"
	"github.com/sluicemesh/sluice/test/harness/nstest"
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
	confDir := filepath.Join(n.dir, "net.d")
	if err := os.MkdirAll(confDir, 0o755); err != nil {
		t.Fatal(err)
	}
	entry := ""
	binDirs := fmt.Sprintf("%q", cniPlugins(t))
	if opts.chained {
		entry = fmt.Sprintf(`, {"type": "sluice", "socket": %q, "timeout": "2s"}`, agentSocket)
		bin := filepath.Join(n.dir, "cni-bin")
		if err := os.MkdirAll(bin, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := copyFile(pluginBinary(t), filepath.Join(bin, "sluice")); err != nil {
			t.Fatal(err)
		}
		binDirs += fmt.Sprintf(", %q", bin)
	}
	primary := fmt.Sprintf(`{"cniVersion": "1.0.0", "name": "pods", "plugins": [
  {"type": "bridge", "bridge": "nri0", "isGateway": true, "ipMasq": false,
   "ipam": {"type": "host-local", "dataDir": %q, "ranges": [[{"subnet": %q}]],
            "routes": [{"dst": "0.0.0.0/0"}]}}%s]}`, filepath.Join(n.dir, "ipam"), podSubnet, entry)
	if err := os.WriteFile(filepath.Join(confDir, "10-pods.conflist"), []byte(primary), 0o644); err != nil {
		t.Fatal(err)
	}
	extra := ""
	if opts.validator {
		extra = validatorConfig
	}
	conf := fmt.Sprintf(containerdConfig, filepath.Join(n.dir, "root"), pauseRef, binDirs, confDir,
		nriSocket, filepath.Join(n.dir, "nri", "plugins"), filepath.Join(n.dir, "nri", "conf.d"), extra)
	c.Containerd = containerdtest.Start(t, containerdtest.Options{
		Dir: n.dir, Config: conf, Bin: c.bin, Crictl: filepath.Join(c.bin, "crictl"),
		Socket: "/run/containerd/containerd.sock", Command: n.command, Pause: pauseArchive(t),
		Reap: n.killAll,
	})
	return c
}

// killAll kills every process in the node's mount namespace but the
// holder, and every process in the pods' cgroups (the pause processes,
// which have mount namespaces of their own).
func (n *node) killAll() {
	if hs, err := nstest.CgroupHierarchies(); err == nil {
		for _, pid := range nstest.CgroupPIDs(hs, n.cgroup) {
			if pid > 1 {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
	self := nsInode(n.pid)
	if self == 0 {
		return
	}
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		pid, err := strconv.Atoi(filepath.Base(p))
		if err != nil || pid == n.pid || nsInode(pid) != self {
			continue
		}
		syscall.Kill(pid, syscall.SIGKILL)
	}
}

func nsInode(pid int) uint64 {
	var st syscall.Stat_t
	if err := syscall.Stat("/proc/"+strconv.Itoa(pid)+"/ns/mnt", &st); err != nil {
		return 0
	}
	return st.Ino
}

func copyFile(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, b, 0o755)
}
