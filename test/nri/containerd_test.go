package nri_test

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/sluicemesh/sluice/test/harness/containerdtest"
)

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
	binDirs := []string{cniPlugins(t)}
	if opts.chained {
		entry = fmt.Sprintf(`, {"type": "sluice", "socket": %q, "timeout": "2s"}`, n.Socket)
		if err := copyFile(pluginBinary(t), filepath.Join(n.CNIBin, "sluice")); err != nil {
			t.Fatal(err)
		}
		binDirs = append(binDirs, n.CNIBin)
	}
	primary := fmt.Sprintf(`{"cniVersion": "1.0.0", "name": "pods", "plugins": [
  {"type": "bridge", "bridge": "nri0", "isGateway": true, "ipMasq": false,
   "ipam": {"type": "host-local", "dataDir": %q, "ranges": [[{"subnet": %q}]],
            "routes": [{"dst": "0.0.0.0/0"}]}}%s]}`, filepath.Join(n.Dir, "ipam"), podSubnet, entry)
	if err := os.WriteFile(filepath.Join(confDir, "10-pods.conflist"), []byte(primary), 0o644); err != nil {
		t.Fatal(err)
	}
	conf := containerdtest.Config{Root: filepath.Join(n.Dir, "root"), State: "/run/containerd/state",
		Socket: "/run/containerd/containerd.sock", RuncRoot: "/run/containerd/runc",
		CNIBinDirs: binDirs, CNIConfDir: confDir,
		NRI: &containerdtest.NRI{Socket: nriSocket, PluginPath: filepath.Join(n.Dir, "nri", "plugins"),
			PluginConfigPath: filepath.Join(n.Dir, "nri", "conf.d")}}.String()
	if opts.validator {
		conf += containerdtest.NRIValidator("sluice", "sluice.dev/tolerate-missing-nri")
	}
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
