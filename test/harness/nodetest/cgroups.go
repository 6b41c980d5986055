package nodetest

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sluicemesh/sluice/test/harness/nstest"
)

// makeCgroups creates the node's cgroup root, the kubelet's cgroupRoot,
// in every hierarchy, and a "system" child for the node's daemons. cpuset
// children start with no CPUs and no memory nodes, so they get the
// parent's.
func (c *Cluster) makeCgroups() error {
	hs, err := nstest.CgroupHierarchies()
	if err != nil {
		return err
	}
	c.hierarchies = hs
	for _, h := range hs {
		for _, d := range []string{c.cgroup, c.cgroup + "/system"} {
			dir := filepath.Join(h, d)
			if err := os.Mkdir(dir, 0o755); err != nil {
				return fmt.Errorf("create cgroup: %w", err)
			}
			if filepath.Base(h) == "cpuset" {
				for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
					v, err := os.ReadFile(filepath.Join(filepath.Dir(dir), f))
					if err != nil {
						return fmt.Errorf("read cpuset: %w", err)
					}
					if err := os.WriteFile(filepath.Join(dir, f), v, 0o644); err != nil {
						return fmt.Errorf("write cpuset: %w", err)
					}
				}
			}
		}
	}
	return nil
}

// joinCgroups is shell that moves pid into the node's system cgroup in
// every hierarchy, so all the node's processes and their children are
// found there at teardown.
func (c *Cluster) joinCgroups(pid string) string {
	var b strings.Builder
	for _, h := range c.hierarchies {
		fmt.Fprintf(&b, "echo %s > %s/%s/system/cgroup.procs\n", pid, h, c.cgroup)
	}
	return b.String()
}

// cgroupPIDs are the processes in the node's cgroup tree.
func (c *Cluster) cgroupPIDs() []int { return nstest.CgroupPIDs(c.hierarchies, c.cgroup) }

// killCgroups SIGKILLs everything in the node's cgroups until none is left.
func (c *Cluster) killCgroups(deadline time.Duration) error {
	return nstest.KillCgroup(c.hierarchies, c.cgroup, deadline)
}

// removeCgroups removes the node's cgroup trees, deepest first.
func (c *Cluster) removeCgroups(deadline time.Duration) error {
	return nstest.RemoveCgroup(c.hierarchies, c.cgroup, deadline)
}

// cgroupPrefix starts every node's cgroup name; the name ends in the PID of
// the process that owns the cluster.
const cgroupPrefix = "sluice-node-"

// reapOrphans removes what is left of clusters whose owner died without
// tearing down (a test binary killed by its timeout): their direct
// children die with it (Pdeathsig), but containerd's shims and the
// containers live on in the node's cgroups. Only cgroups with this
// package's prefix whose owner PID is gone are touched.
func reapOrphans() {
	hs, err := nstest.CgroupHierarchies()
	if err != nil {
		return
	}
	names := map[string]bool{}
	for _, h := range hs {
		m, _ := filepath.Glob(filepath.Join(h, cgroupPrefix+"*"))
		for _, d := range m {
			names[filepath.Base(d)] = true
		}
	}
	for name := range names {
		i := strings.LastIndex(name, "-")
		owner, err := strconv.Atoi(name[i+1:])
		if err != nil || owner <= 0 || syscall.Kill(owner, 0) == nil {
			continue // not ours, or its owner still runs
		}
		orphan := &Cluster{cgroup: name, hierarchies: hs}
		_ = orphan.killCgroups(10 * time.Second)
		_ = orphan.removeCgroups(5 * time.Second)
	}
}
