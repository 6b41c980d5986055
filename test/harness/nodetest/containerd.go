package nodetest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/sluicemesh/sluice/test/harness/containerdtest"
)

// containerdSocket is containerd's socket in the node's private /run.
const containerdSocket = "/run/containerd/containerd.sock"

// DefaultCNIVersion is the primary conflist's cniVersion unless Options say
// otherwise: 1.1.0, the first with STATUS, which containerd 2.x then calls
// on every plugin of the list (sluice's entry too) to decide whether the
// node's network is ready.
const DefaultCNIVersion = "1.1.0"

// ContainerdBinaries returns the directory of containerd 2.x, its runc shim,
// ctr and crictl, building them with hack/containerd/build.sh on first use
// (about 4 CPU-minutes, once per machine and version), as `make containerd`
// does.
func ContainerdBinaries(ctx context.Context) (string, error) {
	root, err := ModuleRoot()
	if err != nil {
		return "", err
	}
	var stderr strings.Builder
	cmd := exec.CommandContext(ctx, filepath.Join(root, "hack", "containerd", "build.sh"))
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("build containerd: %w\n%s", err, stderr.String())
	}
	return strings.TrimSpace(string(out)), nil
}

// SystemContainerd is the directory of the machine's own containerd (the
// first on PATH; Debian's is 1.6, which never calls CNI STATUS), for tests
// of a node that runs containerd 1.x.
func SystemContainerd() (string, error) {
	bin, err := exec.LookPath("containerd")
	if err != nil {
		return "", fmt.Errorf("find the machine's containerd: %w", err)
	}
	return filepath.Dir(bin), nil
}

// primaryConflist is the node's primary CNI: the reference bridge with
// host-local IPAM, as a kubeadm node with the bridge CNI would have. The
// bridge masquerades nothing: the node's own rule (link) masquerades what
// leaves the cluster's pod range, so the control plane answers pods
// without a route back to the pod CIDR, and pods on different nodes see
// each other's addresses, as under flannel or Calico.
const primaryConflist = `{
  "cniVersion": %[1]q,
  "name": "nodetest",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "cni0",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": %[2]q}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    }
  ]
}
`

// PrimaryConflist is the file name of the node's primary CNI config.
const PrimaryConflist = "10-nodetest.conflist"

// containerdIsV2 says whether the containerd in dir is 2.x, which wants a
// version 3 config.
func containerdIsV2(ctx context.Context, dir string) (bool, error) {
	out, err := exec.CommandContext(ctx, filepath.Join(dir, "containerd"), "--version").Output()
	if err != nil {
		return false, fmt.Errorf("containerd --version in %s: %w", dir, err)
	}
	return strings.Contains(string(out), "github.com/containerd/containerd/v2 "), nil
}

func (c *Cluster) startContainerd(ctx context.Context) error {
	for _, p := range []string{"bridge", "host-local", "loopback"} {
		b, err := os.ReadFile(filepath.Join(c.plugins, p))
		if err != nil {
			return fmt.Errorf("read CNI plugin: %w", err)
		}
		if err := os.WriteFile(c.path("cni/bin", p), b, 0o755); err != nil {
			return fmt.Errorf("install CNI plugin: %w", err)
		}
	}
	primary := fmt.Sprintf(primaryConflist, c.cniVersion, c.podCIDR)
	if err := os.WriteFile(c.ConfDir(PrimaryConflist), []byte(primary), 0o644); err != nil {
		return err
	}
	v2, err := containerdIsV2(ctx, c.containerdBin)
	if err != nil {
		return err
	}
	// Pod netns mounts in /var/run/netns, where the agent's chart looks.
	conf := containerdtest.Config{V2: !v2, Root: c.path("containerd"), State: "/run/containerd/state",
		Socket: containerdSocket, RuncRoot: "/run/containerd/runc",
		CNIBinDirs: []string{"/opt/cni/bin"}, CNIConfDir: "/etc/cni/net.d"}
	if v2 {
		// NRI on, as containerd 2.x's default has it, with the plugin dirs
		// the cluster's; no plugin connects unless a test installs one, and
		// no validator is set until RequireNRIPlugin.
		conf.NRI = &containerdtest.NRI{Socket: nriSocket, PluginPath: c.path("nri", "plugins"), PluginConfigPath: c.path("nri", "conf.d")}
	}
	if err := os.WriteFile(c.path("containerd.toml"), []byte(conf.String()), 0o644); err != nil {
		return err
	}
	// The shim is looked up on PATH: this containerd's own first, not
	// another version's from the machine.
	p, err := start("containerd", c.path("containerd.log"), c.InNode("env", "PATH="+c.containerdBin+":"+os.Getenv("PATH"),
		filepath.Join(c.containerdBin, "containerd"), "--config", c.path("containerd.toml")))
	if err != nil {
		return err
	}
	c.procs = append(c.procs, p)
	c.containerd = p
	return c.awaitContainerd(ctx, p)
}

// awaitContainerd returns once p, the node's containerd, serves both its
// own API and the CRI: the CRI plugin answers "server is not initialized
// yet" for a moment after the socket serves, and a kubelet started then
// exits at once (seen in a reboot; a real node's systemd restarts it, this
// harness does not).
func (c *Cluster) awaitContainerd(ctx context.Context, p *process) error {
	crictl, err := c.crictl(ctx)
	if err != nil {
		return err
	}
	return poll(ctx, p, "containerd to serve its API and the CRI", func() error {
		if out, err := c.ctr(ctx, "version").CombinedOutput(); err != nil {
			return fmt.Errorf("ctr version: %w: %s", err, out)
		}
		cri := exec.CommandContext(ctx, crictl,
			"--runtime-endpoint", "unix://"+c.NodeRoot()+containerdSocket, "--timeout", "2s", "version")
		if out, err := cri.CombinedOutput(); err != nil {
			return fmt.Errorf("crictl version: %w: %s", err, out)
		}
		return nil
	})
}

// crictl is the harness's crictl: beside the node's containerd when the
// harness built it, else from the harness's build (a node on the
// machine's own containerd 1.x, whose directory has none).
func (c *Cluster) crictl(ctx context.Context) (string, error) {
	if p := filepath.Join(c.containerdBin, "crictl"); fileExists(p) {
		return p, nil
	}
	dir, err := ContainerdBinaries(ctx)
	if err != nil {
		return "", fmt.Errorf("crictl for the node's containerd: %w", err)
	}
	return filepath.Join(dir, "crictl"), nil
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// ctr is the node's containerd's own ctr, run from the machine.
func (c *Cluster) ctr(ctx context.Context, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, filepath.Join(c.containerdBin, "ctr"),
		append([]string{"--address", c.NodeRoot() + containerdSocket}, args...)...)
}

// ImportImage loads an image archive (OCI or docker) into the node's
// containerd, where the kubelet finds it: pods use imagePullPolicy Never.
func (c *Cluster) ImportImage(ctx context.Context, archive string) error {
	out, err := c.ctr(ctx, "-n", "k8s.io", "images", "import", archive).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ctr images import %s: %w\n%s", archive, err, out)
	}
	return nil
}

// TagImage gives every node's image src the further name dst, as a
// second build of the same content would be named: a chart upgrade to dst
// rolls the DaemonSet without another build.
func (c *Cluster) TagImage(ctx context.Context, src, dst string) error {
	for _, n := range c.Nodes() {
		out, err := n.ctr(ctx, "-n", "k8s.io", "images", "tag", "--force", src, dst).CombinedOutput()
		if err != nil {
			return fmt.Errorf("node %s: ctr images tag %s %s: %w\n%s", n.NodeName, src, dst, err, out)
		}
	}
	return nil
}

// KillContainer SIGKILLs a container's process through the node's
// containerd, as an OOM kill or a crash would end it; the kubelet decides
// whether it restarts. id is the CRI container ID (a pod status's
// containerID less its "containerd://").
func (c *Cluster) KillContainer(ctx context.Context, id string) error {
	id = strings.TrimPrefix(id, "containerd://")
	out, err := c.ctr(ctx, "-n", "k8s.io", "tasks", "kill", "--signal", "SIGKILL", id).CombinedOutput()
	if err != nil {
		return fmt.Errorf("kill container %s: %w\n%s", id, err, out)
	}
	return nil
}
