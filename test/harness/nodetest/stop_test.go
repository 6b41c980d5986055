package nodetest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Teardown's proof is only worth something if it can fail: a process that
// slipped out of the node's cgroups but still holds its network namespace
// is named, and so is a mount left below the cluster's dir. Only the node's
// namespaces and cgroups are made here, no control plane.
func TestStopReportsLeftovers(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: network and mount namespaces, cgroups")
	}
	c, err := newCluster(Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(c.Dir) })
	for _, f := range []func() error{c.makeCgroups, c.startHolder, c.link} {
		if err := f(); err != nil {
			c.Stop()
			t.Fatal(err)
		}
	}
	// Joins the node's netns but not its cgroups.
	stray := exec.Command("nsenter", "--target", itoa(c.holderPID), "--net", "sleep", "60")
	stray.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := stray.Start(); err != nil {
		c.Stop()
		t.Fatal(err)
	}
	t.Cleanup(func() { stray.Process.Kill(); stray.Wait() })
	// Start returns once nsenter runs, not once it has joined: wait until
	// the stray holds the node's netns, or Stop may look before it does.
	joined := func() error {
		mine, _ := os.Readlink("/proc/" + itoa(stray.Process.Pid) + "/ns/net")
		node, _ := os.Readlink("/proc/" + itoa(c.holderPID) + "/ns/net")
		if mine == "" || mine != node {
			return fmt.Errorf("stray in %q, node in %q", mine, node)
		}
		return nil
	}
	jctx, jcancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer jcancel()
	if err := poll(jctx, nil, "stray joins the node's netns", joined); err != nil {
		c.Stop()
		t.Fatal(err)
	}
	mnt := c.path("leak")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("nodetest-leak", mnt, "tmpfs", 0, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Unmount(mnt, syscall.MNT_DETACH) })

	err = c.Stop()
	if err == nil {
		t.Fatal("Stop with a stray process and a stray mount reported nothing")
	}
	for _, want := range []string{"process " + itoa(stray.Process.Pid), "mount " + mnt} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Stop's error %q does not name %q", err, want)
		}
	}
	if _, statErr := os.Stat(c.Dir); statErr != nil {
		t.Errorf("cluster dir removed although something was left: %v", statErr)
	}
	// With the strays gone the node is gone too: nothing of its own kept.
	stray.Process.Kill()
	stray.Wait()
	syscall.Unmount(mnt, syscall.MNT_DETACH)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := poll(ctx, nil, "no leftovers", c.leftovers); err != nil {
		t.Error(err)
	}
	c.releaseNamespaces()
}

// A cluster whose owner died (a test binary killed by its timeout) leaves
// processes in its cgroups; the next Start reaps them and their cgroups,
// and leaves a live owner's alone.
func TestReapOrphans(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: cgroups")
	}
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	orphan := &Cluster{cgroup: cgroupPrefix + "reaptest-" + itoa(dead.Process.Pid)}
	live := &Cluster{cgroup: cgroupPrefix + "reaptest-" + itoa(os.Getpid())}
	var sleepers []*exec.Cmd
	for _, c := range []*Cluster{orphan, live} {
		if err := c.makeCgroups(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.killCgroups(5 * time.Second); c.removeCgroups(5 * time.Second) })
		s := exec.Command("sh", "-c", c.joinCgroups("$$")+"exec sleep 60")
		if err := s.Start(); err != nil {
			t.Fatal(err)
		}
		sleepers = append(sleepers, s)
		t.Cleanup(func() { s.Process.Kill(); s.Wait() })
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		err := poll(ctx, nil, "sleeper in its cgroup", func() error {
			if len(c.cgroupPIDs()) == 0 {
				return os.ErrNotExist
			}
			return nil
		})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	}
	reapOrphans()
	if err := sleepers[0].Wait(); err == nil {
		t.Error("orphan's process exited cleanly; want it killed")
	}
	for _, h := range orphan.hierarchies {
		if _, err := os.Stat(h + "/" + orphan.cgroup); err == nil {
			t.Errorf("orphan cgroup %s/%s left", h, orphan.cgroup)
		}
	}
	if pids := live.cgroupPIDs(); len(pids) != 1 {
		t.Errorf("live owner's cgroup holds %v, want its sleeper untouched", pids)
	}
}
