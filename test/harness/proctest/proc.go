// Package proctest starts the processes of a test (the agent, containerd, a
// namespace holder, a stand-in server) the one way: forked from an OS
// thread locked for the child's whole life, so its Pdeathsig holds, in a
// process group of its own, with its stdout and stderr captured; at the
// test's end the group is killed and the child reaped, and its log quoted
// if the test failed. Where a child runs (a netns, a node's mount
// namespace) is the caller's exec.Cmd: nstest.NS.Command or a node's
// Command.
package proctest

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicemesh/sluice/test/harness/nstest"
	"github.com/sluicemesh/sluice/test/harness/syncbuf"
)

// Proc is a started daemon (sluice-agent, containerd, a stand-in) with its
// output captured and its end watched.
type Proc struct {
	Cmd  *exec.Cmd
	Logs *Logs
	// Done is closed when the process has exited.
	Done <-chan struct{}
}

// Start starts cmd (Launch) with its stdout and stderr in Logs. At the
// test's end its group is killed, the process reaped and, if the test
// failed, its log quoted.
func Start(t testing.TB, cmd *exec.Cmd) *Proc {
	t.Helper()
	a, err := Launch(cmd, &Logs{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		a.Kill()
		if t.Failed() {
			t.Logf("%s log:\n%s", cmd.Path, a.Logs)
		}
	})
	return a
}

// Launch starts cmd from a locked OS thread (StartLocked), with Pdeathsig
// SIGKILL and in a process group of its own, its stdout and stderr
// appended to logs unless the caller set them. Its end is the caller's
// (Kill): a daemon restarted within one test (containerd) keeps one logs
// and one cleanup.
func Launch(cmd *exec.Cmd, logs *Logs) (*Proc, error) {
	a := &Proc{Cmd: cmd, Logs: logs}
	if cmd.Stdout == nil && cmd.Stderr == nil {
		cmd.Stdout, cmd.Stderr = logs, logs
	}
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	if cmd.SysProcAttr.Pdeathsig == 0 {
		cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	}
	var err error
	if a.Done, err = StartLocked(cmd); err != nil {
		return nil, fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	return a, nil
}

// Kill SIGKILLs the process's group (its children that stayed in it die
// with it) and waits until the process is reaped. The group is signalled
// only while its leader is unreaped, so its id is still ours.
func (a *Proc) Kill() {
	if !a.Exited() {
		syscall.Kill(-a.Cmd.Process.Pid, syscall.SIGKILL)
	}
	<-a.Done
}

// InNetns starts a process that sleeps in the netns at path, as a pod's
// pause process keeps its netns alive, and returns once it is in it. It
// is killed at the test's end, or before by Kill.
func InNetns(t testing.TB, path string) *Proc {
	t.Helper()
	a := Start(t, exec.Command("nsenter", "--net="+path, "--", "sleep", "600"))
	want, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	nstest.Eventually(t, 5*time.Second, func() bool {
		got, err := os.Stat(a.Netns())
		return err == nil && os.SameFile(got, want)
	}, "%s never entered %s", a.Netns(), path)
	return a
}

// Netns is the process's netns, by its /proc path.
func (a *Proc) Netns() string { return "/proc/" + strconv.Itoa(a.Cmd.Process.Pid) + "/ns/net" }

// StartLocked starts cmd from a goroutine locked to its OS thread for the
// child's whole life, and returns a channel closed when it has exited.
// Pdeathsig fires when the thread that forked the child exits, not the
// process: Go retires threads (every nstest.NS.Do does), so a child
// forked from any other thread could be killed mid-test.
func StartLocked(cmd *exec.Cmd) (<-chan struct{}, error) {
	started := make(chan error, 1)
	done := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		cmd.Wait()
		close(done)
	}()
	return done, <-started
}

// Exited reports whether the process has ended.
func (a *Proc) Exited() bool {
	select {
	case <-a.Done:
		return true
	default:
		return false
	}
}

// Alive fails the test at once if the process has ended.
func (a *Proc) Alive(t testing.TB) {
	t.Helper()
	if a.Exited() {
		t.Fatalf("%s exited: %v\n%s", a.Cmd.Path, a.Cmd.ProcessState, a.Logs)
	}
}

// Wait polls cond until it holds, failing at once if the process ends
// first, and after timeout with msg and the log.
func (a *Proc) Wait(t testing.TB, timeout time.Duration, cond func() bool, msg string) {
	t.Helper()
	nstest.Eventually(t, timeout, func() bool {
		a.Alive(t)
		return cond()
	}, "%s:\n%s", msg, a.Logs)
}

// Stop sends SIGTERM and fails the test unless the process exits cleanly
// within 15 s.
func (a *Proc) Stop(t testing.TB) {
	t.Helper()
	a.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-a.Done:
	case <-time.After(15 * time.Second):
		t.Fatalf("%s did not exit on SIGTERM:\n%s", a.Cmd.Path, a.Logs)
	}
	if !a.Cmd.ProcessState.Success() {
		t.Fatalf("%s exit %v:\n%s", a.Cmd.Path, a.Cmd.ProcessState, a.Logs)
	}
}

// Terminate sends SIGTERM and, unless the process has exited within
// grace, kills its group; it returns once the process is reaped and
// reports whether SIGTERM was enough. An ended process is left as it is.
func (a *Proc) Terminate(grace time.Duration) bool {
	if a.Exited() {
		return true
	}
	a.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-a.Done:
		return true
	case <-time.After(grace):
		a.Kill()
		return false
	}
}

// Logs is a process's output, written by its pipes while tests read it.
type Logs struct{ syncbuf.Buffer }

// Lines returns the lines that hold every one of words.
func (l *Logs) Lines(words ...string) []string {
	var out []string
	sc := bufio.NewScanner(strings.NewReader(l.String()))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		match := true
		for _, w := range words {
			match = match && strings.Contains(sc.Text(), w)
		}
		if match {
			out = append(out, sc.Text())
		}
	}
	return out
}

// Count is how many lines hold every one of words.
func (l *Logs) Count(words ...string) int { return len(l.Lines(words...)) }
