package main

import "runtime/debug"

// defaultGCPercent is the agent's GOGC when the environment sets none.
// Every node holds every namespace, and what that costs a node is resident
// memory, which the Go runtime keeps near 1.1 × (1 + GOGC/100) × the live
// heap (the heap goal, plus the scavenger's 10 %): at Go's default of 100 a
// byte the cluster adds to the cache costs about 2.2 bytes of RSS, at 50
// about 1.65. The agent's live heap is a few MB (about 5 at 10,000
// namespaces), so collecting it twice as often is cheap; docs/scale.md has
// the growth measured both ways.
const defaultGCPercent = 50

// setGC applies defaultGCPercent unless GOGC is set (an operator's choice,
// which the runtime has already applied).
func setGC(getenv func(string) string) {
	if getenv("GOGC") == "" {
		debug.SetGCPercent(defaultGCPercent)
	}
}
