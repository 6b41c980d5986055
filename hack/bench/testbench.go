package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"sync/atomic"
	"syscall"
)

// runTestBench runs one benchmark of a test package (`go test -bench` in
// root, with env added) for n iterations and returns its output. The test
// binary gets its own process group, so an interrupted bench ends it and
// the cluster or runtime it runs (they die with it through Pdeathsig).
func runTestBench(root string, cl *cleanups, pkg, bench string, n int, env string) (string, error) {
	return runGoTest(root, cl, pkg, []string{env}, "-run", "^$", "-bench", "^"+bench+"$", "-benchtime", fmt.Sprintf("%dx", n))
}

// runGoTest runs `go test -count 1 -timeout 30m args pkg` in root with env
// added, as runTestBench does.
func runGoTest(root string, cl *cleanups, pkg string, env []string, args ...string) (string, error) {
	cmd := exec.Command("go", append(append([]string{"test", "-count", "1", "-timeout", "30m"}, args...), pkg)...)
	cmd.Dir, cmd.Env = root, append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return "", err
	}
	var exited atomic.Bool
	cl.add(func() {
		if !exited.Load() {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		}
	})
	err := cmd.Wait()
	exited.Store(true)
	if err != nil {
		return out.String(), fmt.Errorf("go test %s: %v: %s", pkg, err, tail(out.String(), 15))
	}
	return out.String(), nil
}
