// Package oneproc runs the plugin on one P from its first package inits:
// importing it for its side effect sets GOMAXPROCS to 1.
//
// An exec of the plugin makes one call and runs no goroutines of its own;
// with a P per core the runtime's background goroutines (started before any
// init) and GC woke a second thread that spun for work. GOMAXPROCS=1 in the
// environment would avoid all of it, but the container runtime sets the
// plugin's environment. This package imports nothing but the runtime, so
// it is initialised among the first packages, before the plugin's ~50
// others; set at the top of main it came after them. Measured (ADD exec CPU,
// p50 of 300 interleaved, twice): 3.08 → 2.84 and 3.18 → 3.09 ms, against
// 2.67–2.78 ms with the variable set (docs/history/performance.md).
package oneproc

import "runtime"

func init() { runtime.GOMAXPROCS(1) }
