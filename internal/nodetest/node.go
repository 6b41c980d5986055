package nodetest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	pause "github.com/sluicemesh/sluice/hack/pause/image"
)

// containerdSocket is containerd's socket in the node's private /run.
const containerdSocket = "/run/containerd/containerd.sock"

// containerdConfig is a version 2 config, as the e2e runtime test's: its
// own root and runc root; plugins that would touch the machine's own paths
// or cannot work here are off.
const containerdConfig = `version = 2
root = %[1]q
state = "/run/containerd/state"
disabled_plugins = [
  "io.containerd.internal.v1.opt",
  "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.zfs",
  "io.containerd.tracing.processor.v1.otlp",
]

[grpc]
  address = %[2]q

[ttrpc]
  address = "/run/containerd/containerd.sock.ttrpc"

[plugins."io.containerd.grpc.v1.cri"]
  # The only place the pause image is set: kubelet 1.37 has no flag for it.
  sandbox_image = %[3]q
  # This VM's root lacks CAP_SYS_RESOURCE: never lower a child's oom_score_adj.
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
        Root = "/run/containerd/runc"
        SystemdCgroup = false

  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/opt/cni/bin"
    conf_dir = "/etc/cni/net.d"
    max_conf_num = 1
`

// primaryConflist is the node's primary CNI: the reference bridge with
// host-local IPAM, as a kubeadm node with the bridge CNI would have. Pod
// traffic leaving the node is masqueraded to the node IP, so the control
// plane answers pods without a route back to the pod CIDR.
const primaryConflist = `{
  "cniVersion": "1.0.0",
  "name": "nodetest",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "cni0",
      "isGateway": true,
      "ipMasq": true,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "` + podCIDR + `"}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    }
  ]
}
`

// PrimaryConflist is the file name of the node's primary CNI config.
const PrimaryConflist = "10-nodetest.conflist"

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
	if err := os.WriteFile(c.ConfDir(PrimaryConflist), []byte(primaryConflist), 0o644); err != nil {
		return err
	}
	conf := fmt.Sprintf(containerdConfig, c.path("containerd"), containerdSocket, pause.DefaultRef)
	if err := os.WriteFile(c.path("containerd.toml"), []byte(conf), 0o644); err != nil {
		return err
	}
	p, err := start("containerd", c.path("containerd.log"), c.InNode("containerd", "--config", c.path("containerd.toml")))
	if err != nil {
		return err
	}
	c.procs = append(c.procs, p)
	c.containerd = p
	return poll(ctx, p, "containerd to serve", func() error {
		return exec.CommandContext(ctx, "ctr", "--address", c.NodeRoot()+containerdSocket, "version").Run()
	})
}

// ImportImage loads an image archive (OCI or docker) into the node's
// containerd, where the kubelet finds it: pods use imagePullPolicy Never.
func (c *Cluster) ImportImage(ctx context.Context, archive string) error {
	out, err := exec.CommandContext(ctx, "ctr", "--address", c.NodeRoot()+containerdSocket, "-n", "k8s.io",
		"images", "import", archive).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ctr images import %s: %w\n%s", archive, err, out)
	}
	return nil
}

// kubeletConfig fits the kubelet to this VM: cgroup v1 hybrid (allowed),
// cgroupfs (containerd 1.6 cannot report its driver), its cgroups under the
// node's root, no oom_score_adj it may not set, eviction and image GC that a
// busy shared disk never trips, and a resolv.conf on loopback so nothing
// resolves names off the machine.
const kubeletConfig = `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: /%[1]s
cgroupsPerQOS: true
containerRuntimeEndpoint: unix://%[2]s
address: %[3]s
healthzBindAddress: %[3]s
readOnlyPort: 0
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization:
  mode: AlwaysAllow
oomScoreAdj: 0
failSwapOn: false
resolvConf: %[4]s
clusterDomain: ` + clusterDomain + `
evictionHard:
  memory.available: "1%%"
  nodefs.available: "1%%"
  nodefs.inodesFree: "1%%"
  imagefs.available: "1%%"
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
nodeStatusUpdateFrequency: 2s
syncFrequency: 10s
`

func (c *Cluster) startKubelet() error {
	if err := os.WriteFile(c.path("resolv.conf"), []byte("nameserver 127.0.0.1\n"), 0o644); err != nil {
		return err
	}
	conf := fmt.Sprintf(kubeletConfig, c.cgroup, containerdSocket, c.NodeIP, c.path("resolv.conf"))
	if err := os.WriteFile(c.path("kubelet.yaml"), []byte(conf), 0o644); err != nil {
		return err
	}
	p, err := start("kubelet", c.path("kubelet.log"), c.InNode(c.bin("kubelet"),
		"--config="+c.path("kubelet.yaml"),
		"--kubeconfig="+c.kubeconfig("kubelet"),
		"--hostname-override="+c.NodeName,
		"--node-ip="+c.NodeIP,
		"--v=1",
	))
	if err != nil {
		return err
	}
	c.procs = append(c.procs, p)
	c.kubelet = p
	return nil
}

// kubeProxyConfig: nftables mode in the node's netns; no conntrack
// sysctls, which are machine-wide.
const kubeProxyConfig = `apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: nftables
clientConnection:
  kubeconfig: %[1]s
hostnameOverride: %[2]s
bindAddress: %[3]s
healthzBindAddress: %[3]s:10256
metricsBindAddress: 127.0.0.1:10249
clusterCIDR: ` + podCIDR + `
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
`

func (c *Cluster) startKubeProxy(ctx context.Context) error {
	conf := fmt.Sprintf(kubeProxyConfig, c.kubeconfig("kube-proxy"), c.NodeName, c.NodeIP)
	if err := os.WriteFile(c.path("kube-proxy.yaml"), []byte(conf), 0o644); err != nil {
		return err
	}
	p, err := start("kube-proxy", c.path("kube-proxy.log"), c.InNode(c.bin("kube-proxy"), "--config="+c.path("kube-proxy.yaml")))
	if err != nil {
		return err
	}
	c.procs = append(c.procs, p)
	c.kubeProxy = p
	return waitHTTP(ctx, p, insecureClient(), "http://"+c.NodeIP+":10256/healthz", "")
}

// poll calls f until it succeeds, failing early if p exits.
func poll(ctx context.Context, p *process, what string, f func() error) error {
	var last error
	for {
		if p != nil {
			if err := p.alive(); err != nil {
				return err
			}
		}
		if last = f(); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			tail := ""
			if p != nil {
				tail = "\n" + p.logTail()
			}
			return fmt.Errorf("wait for %s: %w (last: %v)%s", what, ctx.Err(), last, tail)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// NodePath is a path of the node's filesystem, as the machine sees it.
// /var/run is a symlink to /run, and an absolute symlink under
// /proc/PID/root resolves against the machine's root, not the node's: so
// the link is followed here.
func (c *Cluster) NodePath(path string) string {
	if rest, ok := strings.CutPrefix(path, "/var/run/"); ok {
		path = "/run/" + rest
	}
	return c.NodeRoot() + path
}

// ConfDir is a path in the node's /etc/cni/net.d, as the machine sees it.
func (c *Cluster) ConfDir(name ...string) string {
	return c.path(append([]string{"cni/net.d"}, name...)...)
}
