package nodetest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/sluicemesh/sluice/test/harness/nstest"
)

// Reboot takes the node down as a power cut does and boots it again: the
// kubelet stops, containerd, its shims and every container (the agent's
// too) are killed, and the node's /run, a tmpfs on a real node, comes back
// empty: pod netns mounts, containerd's state, the agent's socket and
// journal are gone. What a node keeps on disk stays: the conflists in
// /etc/cni/net.d (sluice's entry too), /opt/cni/bin, /var/lib/kubelet,
// /var/lib/cni and containerd's root. Then containerd and the kubelet start
// again with their existing configs; the kubelet finds every pod's sandbox
// dead and makes a new one, with a new netns, through CNI. kube-proxy and
// the node's own network namespace stay: they are not what is under test.
// Reboot returns once containerd serves and the kubelet runs; the pods come
// back on their own. It works on any node of the cluster (Nodes).
func (c *Cluster) Reboot(ctx context.Context) error {
	kubeletArgv, containerdArgv := c.kubelet.Cmd.Args, c.containerd.Cmd.Args
	c.kubelet.Stop(5 * time.Second)
	if err := c.killRuntime(10 * time.Second); err != nil {
		return fmt.Errorf("reboot node %s: %w", c.NodeName, err)
	}
	if err := c.removePodCgroups(5 * time.Second); err != nil {
		return fmt.Errorf("reboot node %s: %w", c.NodeName, err)
	}
	if err := c.emptyRun(ctx); err != nil {
		return fmt.Errorf("reboot node %s: %w", c.NodeName, err)
	}
	if err := c.restartContainerd(ctx, containerdArgv); err != nil {
		return fmt.Errorf("reboot node %s: %w", c.NodeName, err)
	}
	p, err := start("kubelet", c.path("kubelet.log"), kubeletArgv)
	if err != nil {
		return fmt.Errorf("reboot node %s: %w", c.NodeName, err)
	}
	c.procs = append(c.procs, p)
	c.kubelet = p
	return nil
}

// killRuntime SIGKILLs everything in the node's cgroups but the holder of
// its namespaces and kube-proxy: containerd, the shims, every container.
func (c *Cluster) killRuntime(deadline time.Duration) error {
	keep := map[int]bool{c.holderPID: true}
	if c.kubeProxy != nil {
		keep[c.kubeProxy.Cmd.Process.Pid] = true
	}
	end := time.Now().Add(deadline)
	for {
		var left []int
		for _, pid := range c.cgroupPIDs() {
			if !keep[pid] {
				left = append(left, pid)
			}
		}
		if len(left) == 0 {
			break
		}
		if time.Now().After(end) {
			return fmt.Errorf("processes still in cgroup %s after SIGKILL: %v", c.cgroup, left)
		}
		for _, pid := range left {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The direct child's exit is reaped by its own goroutine.
	c.containerd.Stop(time.Second)
	return nil
}

// removePodCgroups removes the cgroups the kubelet and containerd made
// below the node's root (a reboot starts with none; the kubelet's cAdvisor
// stalls on stale ones), deepest first; the node's system cgroup, where the
// holder and kube-proxy run, stays.
func (c *Cluster) removePodCgroups(deadline time.Duration) error {
	children := map[string]bool{}
	for _, h := range c.hierarchies {
		entries, _ := os.ReadDir(filepath.Join(h, c.cgroup))
		for _, e := range entries {
			if e.IsDir() && e.Name() != "system" {
				children[e.Name()] = true
			}
		}
	}
	var errs []error
	for name := range children {
		errs = append(errs, nstest.RemoveCgroup(c.hierarchies, filepath.Join(c.cgroup, name), deadline))
	}
	return errors.Join(errs...)
}

// emptyRunScript unmounts everything below the node's /run, deepest
// first (pod netns bind mounts, container rootfs and shm mounts), and
// empties it, leaving the two dirs the holder made.
const emptyRunScript = `set -eu
awk '$5 ~ "^/run/" {print $5}' /proc/self/mountinfo | sort -r | while read -r m; do umount -l "$m" 2>/dev/null || true; done
find /run -mindepth 1 -maxdepth 1 -exec rm -rf --one-file-system {} +
mkdir -p /run/netns /run/containerd
`

// emptyRun is what a reboot does to the node's /run (a tmpfs).
func (c *Cluster) emptyRun(ctx context.Context) error {
	cmd := exec.CommandContext(ctx, "nsenter", "--target", strconv.Itoa(c.holderPID), "--mount", "--", "sh", "-c", emptyRunScript)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("empty the node's /run: %w\n%s", err, out)
	}
	return nil
}

// restartContainerd starts containerd as it was first started, with the
// config that start wrote: the conflists and plugins on the node's disk are
// left as they are, as a boot finds them (its start path writes the
// primary conflist afresh, which would drop sluice's entry).
func (c *Cluster) restartContainerd(ctx context.Context, argv []string) error {
	p, err := start("containerd", c.path("containerd.log"), argv)
	if err != nil {
		return err
	}
	c.procs = append(c.procs, p)
	c.containerd = p
	return c.awaitContainerd(ctx, p)
}
