package main

import (
	"fmt"
	"regexp"
	"strconv"
)

// verifyResult is daemon/workloads' BenchmarkVerifyPass250: the agent's CPU
// for one cheap verify pass over 250 untouched pods, and that as a share of
// one core at the default --verify-interval (5 s).
type verifyResult struct {
	cpuMS, corePct float64
	err            error
}

// benchVerify runs BenchmarkVerifyPass250 as a subprocess (it needs root
// and makes its own netns) for passes passes.
func benchVerify(passes int, cl *cleanups) *verifyResult {
	root, err := moduleRoot()
	if err != nil {
		return &verifyResult{err: err}
	}
	out, err := runTestBench(root, cl, "./daemon/workloads", "BenchmarkVerifyPass250", passes, "")
	if err != nil {
		return &verifyResult{err: err}
	}
	return parseVerify(out)
}

var verifyLine = regexp.MustCompile(`BenchmarkVerifyPass250\S*\s+\d+\s+\d+ ns/op\s+([0-9.]+) core-%@5s\s+([0-9.]+) cpu-ms/pass`)

func parseVerify(out string) *verifyResult {
	m := verifyLine.FindStringSubmatch(out)
	if m == nil {
		return &verifyResult{err: fmt.Errorf("BenchmarkVerifyPass250 printed no result: %s", tail(out, 5))}
	}
	pct, _ := strconv.ParseFloat(m[1], 64)
	cpu, _ := strconv.ParseFloat(m[2], 64)
	return &verifyResult{cpuMS: cpu, corePct: pct}
}

// writeVerifyGoal is the goal row: watching 250 pods for lost capture
// costs at most 1 % of one core.
func writeVerifyGoal(row func(goal, measured string, ok bool), v *verifyResult) {
	const goal = "verify of 250 pods every 5 s (lost capture back ≤ 7.5 s) ≤ 1 % of one core"
	if v == nil {
		row(goal, "not measured", false)
		return
	}
	if v.err != nil {
		row(goal, fmt.Sprintf("not measured: %v", v.err), false)
		return
	}
	row(goal, fmt.Sprintf("%.2f %% (%.1f ms CPU a pass; `go test -run '^$' -bench VerifyPass250 ./daemon/workloads`)", v.corePct, v.cpuMS), v.corePct <= 1)
}

// verifyPasses is how many passes the benchmark times: a full run enough
// for a steady figure, the smoke run only that it runs.
func verifyPasses(smoke bool) int {
	if smoke {
		return 1
	}
	return 50
}
