//go:build sluicebench

package main

import (
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
)

// A CPU profile of one exec for hack/bench, only in binaries built with
// the sluicebench tag (never shipped): SLUICE_BENCH_PLUGINPROF=dir writes
// dir/<pid>.pprof, sampled at 10 kHz as one exec lasts milliseconds. It
// covers main, not the runtime's start or the package inits, which run
// before this init (the harness reports those from inittrace).
func init() {
	dir := os.Getenv("SLUICE_BENCH_PLUGINPROF")
	if dir == "" {
		return
	}
	f, err := os.Create(fmt.Sprintf("%s/%d.pprof", dir, os.Getpid()))
	if err != nil {
		return
	}
	// Set before StartCPUProfile, whose own 100 Hz request then loses
	// (and says so on stderr, which the harness ignores).
	runtime.SetCPUProfileRate(10000)
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return
	}
	atExit = func() { pprof.StopCPUProfile(); f.Close() }
}
