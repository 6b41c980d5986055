// Command pause is the infra container of a test pod sandbox: it holds the
// sandbox's namespaces open and does nothing else, like Kubernetes'
// pause.c. As PID 1 of the sandbox it reaps any child re-parented to it and
// exits 0 on SIGTERM or SIGINT, so a runtime's stop is clean and quick.
//
// It is built static (CGO_ENABLED=0) and packed into an image by
// internal/ociimage; `go run ./hack/pause/pack` writes that image as a tar
// that `ctr images import` loads, so tests need no registry.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	if os.Getpid() != 1 {
		fmt.Fprintln(os.Stderr, "pause: not PID 1; orphans will not be re-parented here")
	}
	for sig := range sigs {
		if sig != syscall.SIGCHLD {
			fmt.Fprintf(os.Stderr, "pause: %v, exiting\n", sig)
			os.Exit(0)
		}
		reap()
	}
}

// reap collects every exited child. Signals coalesce, so one SIGCHLD may
// stand for several exits: loop until none is left.
func reap() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}
