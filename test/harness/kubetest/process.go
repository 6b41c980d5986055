package kubetest

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/sluicemesh/sluice/test/harness/proctest"
)

// process is a child the tests own: etcd or kube-apiserver.
type process struct {
	name string
	cmd  *exec.Cmd
	log  string          // combined stdout and stderr
	done <-chan struct{} // closed when the process has exited
}

// startProcess runs bin with its output in logPath. Pdeathsig kills the
// child if the test binary dies without cleaning up (a panic, a timeout,
// SIGKILL), so nothing outlives the tests. Pdeathsig is tied to the thread
// that forked the child, and tests that enter network namespaces retire
// threads, so the child is forked from a locked goroutine that keeps its
// thread until the child exits.
func startProcess(name, logPath, bin string, args ...string) (*process, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("start %s: open log: %w", name, err)
	}
	defer logf.Close()
	cmd := exec.Command(bin, args...)
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	done, err := proctest.StartLocked(cmd)
	if err != nil {
		return nil, fmt.Errorf("start %s (%s): %w", name, bin, err)
	}
	return &process{name: name, cmd: cmd, log: logPath, done: done}, nil
}

// exited reports whether the process has ended, and how.
func (p *process) exited() (bool, error) {
	select {
	case <-p.done:
		if ps := p.cmd.ProcessState; !ps.Success() {
			return true, &exec.ExitError{ProcessState: ps}
		}
		return true, nil
	default:
		return false, nil
	}
}

// stop asks the process to exit and kills it if it has not within grace;
// it returns once the process is gone.
func (p *process) stop(grace time.Duration) {
	if ok, _ := p.exited(); ok {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// logTail is the end of the process's output, for error messages.
func (p *process) logTail() string {
	b, err := os.ReadFile(p.log)
	if err != nil {
		return fmt.Sprintf("(read %s log: %v)", p.name, err)
	}
	return tail(string(b), 30)
}
