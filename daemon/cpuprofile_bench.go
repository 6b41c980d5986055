//go:build sluicebench

package main

import (
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"
)

// A CPU profile for hack/bench, only in binaries built with the
// sluicebench tag (never shipped): SLUICE_BENCH_CPUPROFILE=path starts it
// at start-up; SIGUSR1 stops it, writes path and then path+".done".
func init() {
	path := os.Getenv("SLUICE_BENCH_CPUPROFILE")
	if path == "" {
		return
	}
	f, err := os.Create(path)
	if err != nil {
		return
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return
	}
	usr1 := make(chan os.Signal, 1)
	signal.Notify(usr1, syscall.SIGUSR1)
	go func() {
		<-usr1
		pprof.StopCPUProfile()
		f.Close()
		_ = os.WriteFile(path+".done", nil, 0o600)
	}()
}
