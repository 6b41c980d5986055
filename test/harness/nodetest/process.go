package nodetest

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/sluicemesh/sluice/test/harness/proctest"
)

// process is one daemon the cluster runs: a direct child of the process
// that started the cluster, with its real PID (nsenter and the cgroup
// wrapper exec, they do not fork).
type process struct {
	name string
	cmd  *exec.Cmd
	log  string          // combined stdout and stderr
	done <-chan struct{} // closed when the process has exited
}

// status is how the process ended, valid after done.
func (p *process) status() *os.ProcessState { return p.cmd.ProcessState }

// start runs bin with its output in logPath. Pdeathsig kills the child if
// the starting process dies without cleaning up; it is tied to the thread
// that forked, so the fork happens on a locked goroutine that keeps its
// thread until the child exits.
func start(name, logPath string, argv []string) (*process, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("start %s: open log: %w", name, err)
	}
	defer logf.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return startCmd(name, logPath, cmd)
}

func startCmd(name, logPath string, cmd *exec.Cmd) (*process, error) {
	done, err := proctest.StartLocked(cmd)
	if err != nil {
		return nil, fmt.Errorf("start %s (%s): %w", name, cmd.Path, err)
	}
	return &process{name: name, cmd: cmd, log: logPath, done: done}, nil
}

// alive fails when the process has exited, naming its status and log.
func (p *process) alive() error {
	select {
	case <-p.done:
		return fmt.Errorf("%s exited: %v\n%s", p.name, p.status(), p.logTail())
	default:
		return nil
	}
}

// stop sends SIGTERM and SIGKILLs after grace; it returns once the process
// is gone. A nil process is already stopped.
func (p *process) stop(grace time.Duration) {
	if p == nil {
		return
	}
	select {
	case <-p.done:
		return
	default:
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
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > 30 {
		lines = lines[len(lines)-30:]
	}
	return strings.Join(lines, "\n")
}
