package agenttest

import (
	"bufio"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicemesh/sluice/test/harness/nstest"
	"github.com/sluicemesh/sluice/test/harness/syncbuf"
)

// Agent is a started daemon (sluice-agent, or a runtime the agent serves)
// with its output captured and its end watched.
type Agent struct {
	Cmd  *exec.Cmd
	Logs *Logs
	// Done is closed when the process has exited.
	Done <-chan struct{}
}

// Start starts cmd with its stdout and stderr in Logs, from a locked OS
// thread (StartLocked). At the test's end the process is killed and, if
// the test failed, its log quoted.
func Start(t testing.TB, cmd *exec.Cmd) *Agent {
	t.Helper()
	a := &Agent{Cmd: cmd, Logs: &Logs{}}
	cmd.Stdout, cmd.Stderr = a.Logs, a.Logs
	var err error
	if a.Done, err = StartLocked(cmd); err != nil {
		t.Fatalf("start %s: %v", cmd.Path, err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGKILL)
		<-a.Done
		if t.Failed() {
			t.Logf("%s log:\n%s", cmd.Path, a.Logs)
		}
	})
	return a
}

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
func (a *Agent) Exited() bool {
	select {
	case <-a.Done:
		return true
	default:
		return false
	}
}

// Alive fails the test at once if the process has ended.
func (a *Agent) Alive(t testing.TB) {
	t.Helper()
	if a.Exited() {
		t.Fatalf("%s exited: %v\n%s", a.Cmd.Path, a.Cmd.ProcessState, a.Logs)
	}
}

// Wait polls cond until it holds, failing at once if the process ends
// first, and after timeout with msg and the log.
func (a *Agent) Wait(t testing.TB, timeout time.Duration, cond func() bool, msg string) {
	t.Helper()
	nstest.Eventually(t, timeout, func() bool {
		a.Alive(t)
		return cond()
	}, "%s:\n%s", msg, a.Logs)
}

// Stop sends SIGTERM and fails the test unless the process exits cleanly
// within 15 s.
func (a *Agent) Stop(t testing.TB) {
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
