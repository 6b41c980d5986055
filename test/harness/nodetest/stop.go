package nodetest

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Stop tears the cluster down and proves that nothing is left of it: no
// process in its namespaces, cgroups or dir, no mount, no cgroup, no link.
// It is safe to call more than once; what it found left is its error.
func (c *Cluster) Stop() error {
	c.stopOnce.Do(func() { c.stopErr = c.stop() })
	return c.stopErr
}

func (c *Cluster) stop() error {
	var errs []error
	// The other nodes first: their kubelets talk to this one's API server.
	for _, p := range c.peers {
		if err := p.Stop(); err != nil {
			errs = append(errs, err)
		}
	}
	// The kubelet first, so it does not restart what is killed next.
	c.kubelet.Stop(5 * time.Second)
	c.kubeProxy.Stop(5 * time.Second)
	// containerd, the shims, every container and the holder: all in the
	// node's cgroups, whatever they forked.
	if len(c.hierarchies) > 0 {
		if err := c.killCgroups(10 * time.Second); err != nil {
			errs = append(errs, err)
		}
	}
	// The API server may sit on SIGTERM for many seconds with watches
	// open; its state is in etcd, which is thrown away.
	var wg sync.WaitGroup
	for _, p := range c.control {
		wg.Add(1)
		go func() { defer wg.Done(); p.Stop(2 * time.Second) }()
	}
	wg.Wait()
	c.etcd.Stop(5 * time.Second)
	for _, p := range c.procs {
		p.Stop(time.Second)
	}
	if len(c.hierarchies) > 0 {
		if err := c.removeCgroups(5 * time.Second); err != nil {
			errs = append(errs, err)
		}
	}
	// The kernel dismantles a netns whose last process is gone in the
	// background, veth pair and all; delete our end now rather than race it.
	if err := deleteLink(c.hostLink); err != nil {
		errs = append(errs, err)
	}
	if err := c.leftovers(); err != nil {
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		c.releaseNamespaces()
		if err := os.RemoveAll(c.Dir); err != nil {
			errs = append(errs, fmt.Errorf("remove %s: %w", c.Dir, err))
		}
	} else {
		// The namespaces stay pinned too, so what is named stays
		// findable; they go when this process exits.
		errs = append(errs, fmt.Errorf("kept %s for a look", c.Dir))
	}
	return errors.Join(errs...)
}

// LogTails is the end of each daemon's log, for a failed test's output.
func (c *Cluster) LogTails() string {
	var b strings.Builder
	for _, p := range c.procs {
		fmt.Fprintf(&b, "==> %s\n%s\n", p.Name, p.LogTail())
	}
	return b.String()
}

// deleteLink deletes a link if it is there.
func deleteLink(name string) error {
	if _, err := net.InterfaceByName(name); err != nil {
		return nil
	}
	out, err := exec.Command("ip", "link", "del", name).CombinedOutput()
	if err != nil && !strings.Contains(string(out), "Cannot find device") {
		return fmt.Errorf("ip link del %s: %w: %s", name, err, out)
	}
	return nil
}

// leftovers lists what the cluster left on the machine. Our own handles
// on the node's namespaces do not count.
func (c *Cluster) leftovers() error {
	var left []string
	for _, pid := range c.strayProcesses() {
		cmd, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
		left = append(left, fmt.Sprintf("process %d (%s)", pid, strings.ReplaceAll(string(cmd), "\x00", " ")))
	}
	if _, err := net.InterfaceByName(c.hostLink); err == nil {
		left = append(left, "link "+c.hostLink)
	}
	left = append(left, c.strayMounts()...)
	for _, h := range c.hierarchies {
		if _, err := os.Stat(filepath.Join(h, c.cgroup)); err == nil {
			left = append(left, "cgroup "+filepath.Join(h, c.cgroup))
		}
	}
	if len(left) > 0 {
		return fmt.Errorf("node cluster %s left behind: %s", c.id, strings.Join(left, "; "))
	}
	return nil
}

// strayProcesses are processes in the node's namespaces or running
// anything from the cluster's dir.
func (c *Cluster) strayProcesses() []int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		stray := false
		for ns, ino := range c.nsInodes {
			if got, err := nsInode(pid, ns); err == nil && got == ino {
				stray = true
			}
		}
		if cmd, err := os.ReadFile("/proc/" + e.Name() + "/cmdline"); err == nil && strings.Contains(string(cmd), c.Dir) {
			stray = true
		}
		if stray {
			pids = append(pids, pid)
		}
	}
	return pids
}

// strayMounts are the machine's mounts below the cluster's dir and any
// bind mount that keeps one of the node's namespaces alive.
func (c *Cluster) strayMounts() []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return []string{"(read mountinfo: " + err.Error() + ")"}
	}
	defer f.Close()
	var left []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		root, point := fields[3], fields[4]
		if strings.HasPrefix(point, c.Dir) {
			left = append(left, "mount "+point)
		}
		for ns, ino := range c.nsInodes {
			if root == fmt.Sprintf("%s:[%d]", ns, ino) {
				left = append(left, "namespace mount "+point)
			}
		}
	}
	return left
}
