package proctest

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// Daemon is a process whose life is not one test's (a test cluster's node
// daemons, a shared API server's etcd and kube-apiserver), its output in a
// log file that outlives it. It is forked as StartLocked does, with
// Pdeathsig SIGKILL, and stopped by its owner.
type Daemon struct {
	Name string
	Cmd  *exec.Cmd
	Log  string // combined stdout and stderr, unless the caller set them
	// Done is closed when the process has exited.
	Done <-chan struct{}
}

// StartDaemon starts cmd with its output appended to logPath unless the
// caller set cmd's Stdout or Stderr.
func StartDaemon(name, logPath string, cmd *exec.Cmd) (*Daemon, error) {
	if cmd.Stdout == nil && cmd.Stderr == nil {
		logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return nil, fmt.Errorf("start %s: open log: %w", name, err)
		}
		defer logf.Close()
		cmd.Stdout, cmd.Stderr = logf, logf
	}
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	}
	done, err := StartLocked(cmd)
	if err != nil {
		return nil, fmt.Errorf("start %s (%s): %w", name, cmd.Path, err)
	}
	return &Daemon{Name: name, Cmd: cmd, Log: logPath, Done: done}, nil
}

// Exited reports whether the process has ended, and how.
func (d *Daemon) Exited() (bool, error) {
	select {
	case <-d.Done:
		if ps := d.Cmd.ProcessState; !ps.Success() {
			return true, &exec.ExitError{ProcessState: ps}
		}
		return true, nil
	default:
		return false, nil
	}
}

// Alive fails when the process has exited, naming its status and log.
func (d *Daemon) Alive() error {
	if ok, _ := d.Exited(); ok {
		return fmt.Errorf("%s exited: %v\n%s", d.Name, d.Cmd.ProcessState, d.LogTail())
	}
	return nil
}

// Stop sends SIGTERM and SIGKILLs after grace; it returns once the process
// is gone. A nil daemon is already stopped.
func (d *Daemon) Stop(grace time.Duration) {
	if d == nil {
		return
	}
	if ok, _ := d.Exited(); ok {
		return
	}
	_ = d.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.Done:
	case <-time.After(grace):
		_ = d.Cmd.Process.Kill()
		<-d.Done
	}
}

// LogTail is the last 30 lines of the log, for error messages.
func (d *Daemon) LogTail() string {
	b, err := os.ReadFile(d.Log)
	if err != nil {
		return fmt.Sprintf("(read %s log: %v)", d.Name, err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > 30 {
		lines = lines[len(lines)-30:]
	}
	return strings.Join(lines, "\n")
}
