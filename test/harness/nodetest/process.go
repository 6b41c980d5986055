package nodetest

import (
	"os"
	"os/exec"

	"github.com/sluicemesh/sluice/test/harness/proctest"
)

// process is one daemon the cluster runs: a direct child of the process
// that started the cluster, with its real PID (nsenter and the cgroup
// wrapper exec, they do not fork).
type process = proctest.Daemon

// start runs argv with its output in logPath. Pdeathsig kills the child if
// the starting process dies without cleaning up; it is tied to the thread
// that forked, so proctest forks from a locked goroutine that keeps its
// thread until the child exits.
func start(name, logPath string, argv []string) (*process, error) {
	return proctest.StartDaemon(name, logPath, exec.Command(argv[0], argv[1:]...))
}

// startWithStdout is start with stdout to a pipe and stderr to logf.
func startWithStdout(name string, logf, stdout *os.File, argv []string) (*process, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = stdout, logf
	return proctest.StartDaemon(name, logf.Name(), cmd)
}
