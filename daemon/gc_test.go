package main

import (
	"runtime/debug"
	"testing"
)

// The agent collects at GOGC=50 unless the operator set GOGC.
func TestGCPercentDefaultsUnlessSet(t *testing.T) {
	old := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(old) })
	setGC(func(string) string { return "" })
	if got := debug.SetGCPercent(100); got != defaultGCPercent {
		t.Errorf("GOGC unset: the agent collects at %d, want %d", got, defaultGCPercent)
	}
	setGC(func(k string) string {
		if k == "GOGC" {
			return "200" // the runtime applied it at start
		}
		return ""
	})
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("GOGC set: the agent changed the collector's percent to %d", got)
	}
}
