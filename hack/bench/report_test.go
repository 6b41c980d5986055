package main

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func fake(name string, ms ...int) series {
	s := series{name: name}
	for _, v := range ms {
		s.add(time.Duration(v) * time.Millisecond)
	}
	return s
}

func fakeStorm(addMs, delMs int) *stormResult {
	return &stormResult{add: fake("add", addMs, addMs), del: fake("del", delMs, delMs),
		addWall: time.Duration(addMs) * time.Millisecond, delWall: time.Duration(delMs) * time.Millisecond,
		addCPU: cpuTimes{machine: time.Second, process: 3 * time.Millisecond}}
}

// TestReportVerdicts: the report is written from results alone (no root),
// a goal met says met and one missed says missed, and istio-cni that could
// not be built is named as not measured rather than dropped.
func TestReportVerdicts(t *testing.T) {
	out := filepath.Join(t.TempDir(), "benchmarks.md")
	st := &storms{rounds: 1}
	st.quiet.loopback, st.quiet.sluice = fakeStorm(100, 100), fakeStorm(110, 300)
	st.hogged.loopback, st.hogged.sluice = fakeStorm(200, 200), fakeStorm(210, 210)
	r := &results{
		out:    out,
		rules:  []series{fake("sluice", 1), fake("nft -f", 20), fake("iptables-restore", 10)},
		storms: st,
		kube: &kubeResult{loopback: fake("lo", 4), sluice: fake("sluice", 5), standalone: fake("alone", 5),
			istioErr: errors.New("no Go module proxy"),
			burst: &burstResult{count: 3, loopback: burstRun{s: fake("lo burst", 10, 20, 30)},
				sluice: burstRun{s: fake("sluice burst", 10, 20), failed: 1}, agentHWMKiB: 70 << 10}},
		scale: &scaleResult{pods: 5000, small: 10, addSmall: fake("s", 5), addLarge: fake("l", 5),
			loSmall: fake("ls", 4), loLarge: fake("ll", 4),
			sluiceAdd: fake("sa", 5), loopback: fake("lo", 4), rssKiB: 30 << 10, restart: time.Second,
			resyncCPU: time.Second, resyncInterval: time.Minute},
		footprint: &footprint{sizes: map[string]int64{"sluice": 1}, execs: []series{fake("h", 1), fake("s", 2), fake("l", 1)}},
		nri: &nriResult{none: fake("no capture", 100, 110, 120), cni: fake("chained", 104, 114, 124), nri: fake("nri", 101, 112, 121),
			cniCPU: fake("c", 10, 20), nriCPU: fake("n", 10, 10)},
		profile: &profile{perfErr: errors.New("no perf"), pluginCPU: map[string]time.Duration{"sluice": time.Millisecond}},
	}
	if err := writeReport(config{churn: 2, pods: 5000}, r); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	md := string(b)
	for _, want := range []string{
		"| ADD p50, standalone ≤ 1.5× loopback | 1.25× (5.00 ms vs 4.00 ms) | met |",
		"| rule programming ≥ 10× faster than `nft -f` | 20.0× (1.00 ms vs 20.0 ms) | met |",
		"| rule programming ≥ 20× faster than `iptables-restore` (v4 + v6) | 10.0× (1.00 ms vs 10.0 ms) | **missed** |",
		"2 simultaneous DELs, quiet: throughput ≥ 0.8× loopback (1 storms each, pooled) | 0.33× (7 vs 20 DEL/s) | **missed** |",
		"not measured: no Go module proxy | **missed** |",
		"The agent's CPU profile failed: `no perf`",
		"| NRI mode adds less to runp p50 than the chained CNI plugin (its ADD is below the exec floor) | +2.0 ms vs +4.0 ms (runp p50: 112 ms NRI, 114 ms chained, 110 ms no capture; section 7) | met |",
		"| chained | 3 | 114 ms | 124 ms | +4.0 ms | 15.0 ms |",
		"benchmarks/nri.svg",
		"| a rebooted node's burst, 3 simultaneous ADDs (Kubernetes mode): 0 failed | 1 sluice, 0 loopback, not measured istio-cni nftables | **missed** |",
		"| … agent RSS ≤ 64 MiB | 0.0 MiB (peak 70.0 MiB) | **missed** |",
		"- sluice: 1 of 3 failed",
		"the added time is\n+4.0 ms chained and +1.0 ms NRI.",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q", want)
		}
	}
}

// The fleet section prints every figure test/fleet logged, in its order.
func TestFleetFigures(t *testing.T) {
	out := "=== RUN   TestFleetAPIFootprint\n    fleet_test.go:119: figure: fleet | 500 nodes\n    noise\n    add_restart_test.go:62: figure: ADD of a pod ambient | 0 reads, 1 writes\n"
	got := fleetFigures(out)
	want := [][2]string{{"fleet", "500 nodes"}, {"ADD of a pod ambient", "0 reads, 1 writes"}}
	if !slices.Equal(got, want) {
		t.Fatalf("fleetFigures = %q, want %q", got, want)
	}
}
