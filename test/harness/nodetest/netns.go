package nodetest

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The node's own directories: each path the node's components use is
// bind-mounted from the cluster's dir inside the node's mount namespace.
// Paths that do not exist on the machine get their mount point in a
// copy-on-write overlay of their nearest existing parent, so nothing is
// created on the machine's own filesystem.
var nodeDirs = []struct{ path, own string }{
	{"/etc/cni/net.d", "cni/net.d"},
	{"/opt/cni/bin", "cni/bin"},
	{"/var/lib/kubelet", "kubelet"},
	{"/var/lib/cni", "cni/cache"},
	{"/var/log/pods", "log/pods"},
	{"/var/log/containers", "log/containers"},
}

// kernelTunables are the /proc/sys files the kubelet sets at start, with
// the values it wants. In the node's mount namespace a file holding that
// value is bound over each, so the kubelet finds them set and nothing
// machine-wide changes.
var kernelTunables = map[string]string{
	"vm/overcommit_memory":      "1",
	"vm/panic_on_oom":           "0",
	"kernel/panic":              "10",
	"kernel/panic_on_oops":      "1",
	"kernel/keys/root_maxkeys":  "1000000",
	"kernel/keys/root_maxbytes": "25000000",
}

// holderScript runs in the node's new network and mount namespaces (made
// private by unshare): it joins the node's cgroups, lays out the node's
// filesystem, makes every mount shared within the namespace (the agent's
// /var/run/netns mount relies on HostToContainer propagation) and then
// holds both namespaces open.
func (c *Cluster) holderScript() (string, error) {
	var b strings.Builder
	b.WriteString("set -eu\n")
	b.WriteString(c.joinCgroups("$$"))
	// A private /run: containerd's and the shims' sockets, pod netns
	// mounts, the agent's socket and journal, ztunnel's socket.
	b.WriteString("mount -t tmpfs -o mode=0755 nodetest-run /run\n")
	b.WriteString("mkdir -p /run/netns /run/containerd\n")
	overlaid := map[string]bool{}
	for _, d := range nodeDirs {
		own := c.path(d.own)
		if err := os.MkdirAll(own, 0o755); err != nil {
			return "", err
		}
		if _, err := os.Stat(d.path); err != nil {
			parent := nearestExisting(d.path)
			if !overlaid[parent] {
				overlaid[parent] = true
				ovl := c.path("overlay", strings.ReplaceAll(strings.Trim(parent, "/"), "/", "_"))
				for _, sub := range []string{"upper", "work"} {
					if err := os.MkdirAll(filepath.Join(ovl, sub), 0o755); err != nil {
						return "", err
					}
				}
				fmt.Fprintf(&b, "mount -t overlay nodetest-overlay -o lowerdir=%s,upperdir=%s/upper,workdir=%s/work %s\n", parent, ovl, ovl, parent)
			}
			fmt.Fprintf(&b, "mkdir -p %s\n", d.path)
		}
		fmt.Fprintf(&b, "mount --bind %s %s\n", own, d.path)
	}
	sysctl := c.path("sysctl")
	if err := os.MkdirAll(sysctl, 0o755); err != nil {
		return "", err
	}
	for name, value := range kernelTunables {
		f := filepath.Join(sysctl, strings.ReplaceAll(name, "/", "."))
		if err := os.WriteFile(f, []byte(value+"\n"), 0o644); err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "mount --bind %s /proc/sys/%s\n", f, name)
	}
	b.WriteString("mount --make-rshared /\n")
	b.WriteString("ip link set lo up\n")
	b.WriteString("echo ready\n")
	b.WriteString("exec sleep infinity\n")
	return b.String(), nil
}

// nearestExisting is the deepest existing directory above path.
func nearestExisting(path string) string {
	for p := filepath.Dir(path); ; p = filepath.Dir(p) {
		if st, err := os.Stat(p); err == nil && st.IsDir() {
			return p
		}
	}
}

// startHolder creates the node's namespaces and waits until the holder
// says its filesystem is laid out.
func (c *Cluster) startHolder() error {
	script, err := c.holderScript()
	if err != nil {
		return err
	}
	logf, err := os.Create(c.path("holder.log"))
	if err != nil {
		return err
	}
	defer logf.Close()
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	p, err := startWithStdout("node-holder", logf, w, []string{"unshare", "--net", "--mount", "--propagation", "private", "--", "sh", "-c", script})
	w.Close()
	if err != nil {
		r.Close()
		return err
	}
	c.holder = p
	c.procs = append(c.procs, p)
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(r).ReadString('\n')
		line <- strings.TrimSpace(s)
		_, _ = io.Copy(io.Discard, r)
		r.Close()
	}()
	select {
	case s := <-line:
		if s != "ready" {
			<-p.Done
			return fmt.Errorf("node holder failed: %v\n%s", p.Cmd.ProcessState, p.LogTail())
		}
	case <-time.After(30 * time.Second):
		return fmt.Errorf("node holder not ready after 30s\n%s", p.LogTail())
	}
	c.holderPID = p.Cmd.Process.Pid
	for _, ns := range []string{"net", "mnt"} {
		// Held open until teardown has proved the namespace unused: a dead
		// namespace's inode number is soon reused by a new one, which
		// would make the proof compare against a stranger.
		f, err := os.Open("/proc/" + strconv.Itoa(c.holderPID) + "/ns/" + ns)
		if err != nil {
			return fmt.Errorf("open the node's %s namespace: %w", ns, err)
		}
		c.nsFiles = append(c.nsFiles, f)
		ino, err := nsInode(c.holderPID, ns)
		if err != nil {
			return err
		}
		c.nsInodes[ns] = ino
	}
	return nil
}

// releaseNamespaces closes the handles that keep the node's namespaces'
// inode numbers ours.
func (c *Cluster) releaseNamespaces() {
	for _, f := range c.nsFiles {
		f.Close()
	}
	c.nsFiles = nil
}

// nsInode is the inode of a process's namespace of kind ns (net, mnt).
func nsInode(pid int, ns string) (uint64, error) {
	var st syscall.Stat_t
	if err := syscall.Stat("/proc/"+strconv.Itoa(pid)+"/ns/"+ns, &st); err != nil {
		return 0, fmt.Errorf("stat %s namespace of %d: %w", ns, pid, err)
	}
	return st.Ino, nil
}

func itoa(i int) string { return strconv.Itoa(i) }

// InNode is argv run inside the node's network and mount namespaces and
// cgroups, keeping its PID (nsenter and sh exec, neither forks).
func (c *Cluster) InNode(argv ...string) []string {
	pid := strconv.Itoa(c.holderPID)
	wrap := c.joinCgroups("$$") + `exec "$@"`
	return append([]string{"nsenter", "--target", pid, "--net", "--mount", "--", "sh", "-c", wrap, "sh"}, argv...)
}

// podMasquerade is the node's rule for pod traffic, as a primary CNI
// such as flannel lays it: what leaves the cluster's pod range (for the
// control plane, the machine) takes the node's address; traffic between
// pods, on this node or another, keeps the pods' own addresses.
const podMasquerade = "add table ip nodetest; " +
	"add chain ip nodetest postrouting { type nat hook postrouting priority srcnat; policy accept; }; " +
	"add rule ip nodetest postrouting ip saddr " + clusterCIDR + " ip daddr != " + clusterCIDR + " masquerade"

// NetnsPath is the node's network namespace.
func (c *Cluster) NetnsPath() string {
	return "/proc/" + strconv.Itoa(c.holderPID) + "/ns/net"
}

// NodeRoot is the node's filesystem as the machine sees it.
func (c *Cluster) NodeRoot() string {
	return "/proc/" + strconv.Itoa(c.holderPID) + "/root"
}

// link creates the veth pair between the machine and the node: a /30 with
// the control plane on the machine's end. The node masquerades pod traffic
// leaving the cluster's pod range to its own address (podMasquerade).
func (c *Cluster) link() error {
	pid := strconv.Itoa(c.holderPID)
	steps := [][]string{
		{"ip", "link", "add", c.hostLink, "type", "veth", "peer", "name", "eth0", "netns", pid},
		{"ip", "addr", "add", c.HostIP + "/30", "dev", c.hostLink},
		{"ip", "link", "set", c.hostLink, "up"},
		{"nsenter", "--target", pid, "--net", "ip", "addr", "add", c.NodeIP + "/30", "dev", "eth0"},
		{"nsenter", "--target", pid, "--net", "ip", "link", "set", "eth0", "up"},
		// Service IPs are translated by kube-proxy on the node; the route
		// only gets them that far. Nothing else leaves the node.
		{"nsenter", "--target", pid, "--net", "ip", "route", "add", serviceCIDR, "via", c.HostIP},
		{"nsenter", "--target", pid, "--net", "nft", podMasquerade},
	}
	if c.apiIP != c.HostIP {
		// Another node's: the API server listens on the first node's link;
		// the machine delivers locally what arrives for its own address.
		steps = append(steps, []string{"nsenter", "--target", pid, "--net", "ip", "route", "add", c.apiIP + "/32", "via", c.HostIP})
	}
	for _, s := range steps {
		if out, err := exec.Command(s[0], s[1:]...).CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %w\n%s", strings.Join(s, " "), err, out)
		}
	}
	return nil
}
