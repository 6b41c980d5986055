package kubetest

import (
	"os/exec"

	"github.com/sluicemesh/sluice/test/harness/proctest"
)

// process is a child the tests own: etcd or kube-apiserver.
type process = proctest.Daemon

// startProcess runs bin with its output in logPath. Pdeathsig kills the
// child if the test binary dies without cleaning up (a panic, a timeout,
// SIGKILL), so nothing outlives the tests; proctest forks it from a
// locked goroutine, since tests that enter network namespaces retire
// threads and Pdeathsig is tied to the thread that forked.
func startProcess(name, logPath, bin string, args ...string) (*process, error) {
	return proctest.StartDaemon(name, logPath, exec.Command(bin, args...))
}
