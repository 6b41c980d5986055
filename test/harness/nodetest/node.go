package nodetest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

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
	conf := fmt.Sprintf(kubeletConfig, c.cgroup, containerdSocket, c.NodeIP, c.path("resolv.conf")) + c.registerWithTaints()
	if err := os.WriteFile(c.path("kubelet.yaml"), []byte(conf), 0o644); err != nil {
		return err
	}
	p, err := start("kubelet", c.path("kubelet.log"), c.InNode(c.bin("kubelet"),
		"--config="+c.path("kubelet.yaml"),
		"--kubeconfig="+c.kubeconfig("kubelet-"+c.NodeName),
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
clusterCIDR: ` + clusterCIDR + `
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
			if err := p.Alive(); err != nil {
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
				tail = "\n" + p.LogTail()
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

// RuntimeConflist is the config the node's containerd uses for its next
// pod: the lexically first .conf, .conflist or .json in its conf dir. With
// sluice chained, that is sluice's "<primary stem>-sluice.conflist".
func (c *Cluster) RuntimeConflist() (name string, data []byte, err error) {
	entries, err := os.ReadDir(c.ConfDir())
	if err != nil {
		return "", nil, err
	}
	for _, e := range entries { // sorted by name
		switch filepath.Ext(e.Name()) {
		case ".conf", ".conflist", ".json":
			data, err := os.ReadFile(c.ConfDir(e.Name()))
			return e.Name(), data, err
		}
	}
	return "", nil, fmt.Errorf("no CNI config in %s", c.ConfDir())
}

// RuntimeConflistTypes are the plugin types, in order, of RuntimeConflist.
func (c *Cluster) RuntimeConflistTypes(t testing.TB) []string {
	t.Helper()
	_, b, err := c.RuntimeConflist()
	if err != nil {
		t.Fatalf("read node conflist: %v", err)
	}
	var conf struct {
		Plugins []struct {
			Type string `json:"type"`
		} `json:"plugins"`
	}
	if err := json.Unmarshal(b, &conf); err != nil {
		t.Fatalf("parse node conflist: %v\n%s", err, b)
	}
	var types []string
	for _, p := range conf.Plugins {
		types = append(types, p.Type)
	}
	return types
}

// registerWithTaints is the kubelet config's taint list for the node's
// registration, as a node pool's startup taints are set.
func (c *Cluster) registerWithTaints() string {
	if len(c.taints) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("registerWithTaints:\n")
	for _, t := range c.taints {
		fmt.Fprintf(&b, "- {key: %q, value: %q, effect: %q}\n", t.Key, t.Value, t.Effect)
	}
	return b.String()
}

// SetMaxPods sets the node's kubelet maxPods (0: the kubelet's default,
// 110). It rewrites the kubelet's config only: the change takes effect when
// the kubelet next starts (Reboot).
func (c *Cluster) SetMaxPods(n int) error {
	conf, err := os.ReadFile(c.path("kubelet.yaml"))
	if err != nil {
		return fmt.Errorf("set maxPods: %w", err)
	}
	var keep []string
	for _, l := range strings.Split(strings.TrimSuffix(string(conf), "\n"), "\n") {
		if !strings.HasPrefix(l, "maxPods:") {
			keep = append(keep, l)
		}
	}
	if n > 0 {
		keep = append(keep, fmt.Sprintf("maxPods: %d", n))
	}
	if err := os.WriteFile(c.path("kubelet.yaml"), []byte(strings.Join(keep, "\n")+"\n"), 0o644); err != nil {
		return fmt.Errorf("set maxPods: %w", err)
	}
	return nil
}
