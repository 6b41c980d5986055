package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicemesh/sluice/test/harness/lifecycletest"
)

// A samples file as test/peer's BenchmarkPodStart wrote it (-benchtime 3x)
// becomes section 8 and its goal row; one lacking a mode is an error.
func TestLifecycleSamples(t *testing.T) {
	const real = `{"modes":[{"mode":"none","start_ns":[804330679,804273564,803104009]},` +
		`{"mode":"istio-cni","start_ns":[1404396200,1020548526,1205602404]},` +
		`{"mode":"sluice","start_ns":[1404292326,1004333269,1803613380]},` +
		`{"mode":"sluice-nri","start_ns":[805112233,803004112,1001234567]}]}`
	file := filepath.Join(t.TempDir(), "podstart.json")
	if err := os.WriteFile(file, []byte(real), 0o644); err != nil {
		t.Fatal(err)
	}
	var r lifecycleResult
	if err := r.load(file); err != nil {
		t.Fatal(err)
	}
	if len(r.none.d) != 3 || r.sluice.p50() != 1404292326 || r.istio.p50() != 1205602404 || r.nri.p50() != 805112233 {
		t.Fatalf("loaded %v / %v / %v / %v", r.none.d, r.istio.d, r.sluice.d, r.nri.d)
	}
	m := &md{}
	writeLifecycleGoals(m, &r)
	writeLifecycle(m, &r)
	for _, want := range []string{"| sluice chained | 3 | ", "+74.6 %", "missed", "| sluice NRI | 3 | 805 ms | ", "+0.1 %",
		"Scenario counts not measured: `not run`", "create → app started (resolves the relist's steps) | not measured"} {
		if !strings.Contains(m.b.String(), want) {
			t.Errorf("section lacks %q:\n%s", want, m.b.String())
		}
	}
	// With the app's start: its own column and goal row.
	const withApp = `{"modes":[{"mode":"none","start_ns":[804330679],"app_ns":[402000000]},` +
		`{"mode":"istio-cni","start_ns":[1404396200],"app_ns":[530000000]},` +
		`{"mode":"sluice","start_ns":[804292326],"app_ns":[410000000]},` +
		`{"mode":"sluice-nri","start_ns":[805112233],"app_ns":[404000000]}]}`
	if err := os.WriteFile(file, []byte(withApp), 0o644); err != nil {
		t.Fatal(err)
	}
	var a lifecycleResult
	if err := a.load(file); err != nil {
		t.Fatal(err)
	}
	m = &md{}
	writeLifecycleGoals(m, &a)
	writeLifecycle(m, &a)
	for _, want := range []string{"| sluice chained | 1 | 804 ms | 804 ms | -0.0 % | 410 ms | 410 ms | +2.0 % |",
		"create → app started, chained sluice over no mesh CNI | +2.0 % (410 ms vs 402 ms) | met",
		"| istio-cni (sidecar mode) | 1 | 1404 ms | 1404 ms | +74.6 % | 530 ms | 530 ms | +31.8 % |"} {
		if !strings.Contains(m.b.String(), want) {
			t.Errorf("section lacks %q:\n%s", want, m.b.String())
		}
	}
	if err := os.WriteFile(file, []byte(strings.Replace(real, `"sluice-nri"`, `"other"`, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := (&lifecycleResult{}).load(file); err == nil {
		t.Error("samples without sluice NRI loaded")
	}
}

// A results file as the node suites write it becomes the side-by-side
// table; the goal is missed on any count where sluice is worse and on any
// scenario not recorded for both, and met only with all five, none worse.
func TestScenarioCounts(t *testing.T) {
	row := func(cni, scenario string, uncaptured, failed int, p50, p99 int64) string {
		return `{"cni":"` + cni + `","scenario":"` + scenario + `","pods":20,"uncaptured":` + itoa(uncaptured) +
			`,"failed":` + itoa(failed) + `,"evicted":0,"start_p50_ns":3000000000,"start_p99_ns":9000000000,` +
			`"extra_p50_ns":` + itoa64(p50) + `,"extra_p99_ns":` + itoa64(p99) + `}`
	}
	dir := t.TempDir()
	for _, tc := range []struct {
		name  string
		rows  []string
		wants []string
	}{
		{"sluice worse on a delay, outage missing", []string{
			row("sluice", "upgrade", 0, 0, 200e6, 12e9), row("istio-cni", "upgrade", 0, 1, 100e6, 1e9),
			row("sluice", "rollback", 0, 0, 0, 0), row("istio-cni", "rollback", 0, 0, 0, 0),
			row("sluice", "reboot", 0, 0, 0, 0), row("istio-cni", "reboot", 1, 0, 0, 0),
		}, []string{"| upgrade | sluice | 20 | 0 | 0 | 0 | 200 ms | 12000 ms |", "| outage | sluice | not recorded |",
			"| reboot | istio-cni | 20 | 1 | 0 | 0 | 3000 ms | 9000 ms |",
			"worse on upgrade delay p50 200 ms vs 100 ms, upgrade delay p99 12000 ms vs 1000 ms; not recorded: outage", "**missed**"}},
		{"a delay that fell on a failed pod is never, and longer than any", []string{
			row("sluice", "outage", 0, 0, 840e6, 25e9), row("istio-cni", "outage", 0, 12, 900e6, never),
			row("sluice", "upgrade", 0, 0, 1, never), row("istio-cni", "upgrade", 0, 1, 1, 2),
			row("sluice", "rollback", 0, 0, 0, 0), row("istio-cni", "rollback", 0, 0, 0, 0),
			row("sluice", "reboot", 0, 0, 0, 0), row("istio-cni", "reboot", 0, 0, 0, 0),
		}, []string{"| outage | istio-cni | 20 | 0 | 12 | 0 | 900 ms | never |", "| outage | sluice | 20 | 0 | 0 | 0 | 840 ms | 25000 ms |",
			"worse on upgrade delay p99 never vs 0.00 ms; not recorded: reboot-racing-primary (section 8)", "**missed**"}},
		{"all five, none worse", []string{
			row("sluice", "outage", 0, 0, 0, 0), row("istio-cni", "outage", 1, 0, 0, 0),
			row("sluice", "upgrade", 0, 0, 1, 2), row("istio-cni", "upgrade", 0, 0, 1, 2),
			row("sluice", "rollback", 0, 0, 0, 0), row("istio-cni", "rollback", 0, 0, 0, 0),
			row("sluice", "reboot", 0, 0, 0, 0), row("istio-cni", "reboot", 0, 0, 0, 0),
			row("sluice", "reboot-racing-primary", 0, 0, 0, 0), row("istio-cni", "reboot-racing-primary", 3, 2, 0, 0),
		}, []string{"no recorded count worse (section 8) | met |", "| reboot-racing-primary | istio-cni | 20 | 3 | 2 | 0 |"}},
		{"the racing reboot not recorded", []string{
			row("sluice", "outage", 0, 0, 0, 0), row("istio-cni", "outage", 1, 0, 0, 0),
			row("sluice", "upgrade", 0, 0, 1, 2), row("istio-cni", "upgrade", 0, 0, 1, 2),
			row("sluice", "rollback", 0, 0, 0, 0), row("istio-cni", "rollback", 0, 0, 0, 0),
			row("sluice", "reboot", 0, 0, 0, 0), row("istio-cni", "reboot", 0, 0, 0, 0),
		}, []string{"not recorded: reboot-racing-primary", "**missed**"}},
	} {
		file := filepath.Join(dir, "results.json")
		if err := os.WriteFile(file, []byte(`{"counts":[`+strings.Join(tc.rows, ",")+`]}`), 0o644); err != nil {
			t.Fatal(err)
		}
		rows, err := loadLifecycleRows(file)
		if err != nil {
			t.Fatal(err)
		}
		m := &md{}
		r := &scenarioResult{rows: rows}
		writeScenarioGoals(m, r)
		writeScenarios(m, r)
		for _, want := range tc.wants {
			if !strings.Contains(m.b.String(), want) {
				t.Errorf("%s: output lacks %q:\n%s", tc.name, want, m.b.String())
			}
		}
	}
}

const never = int64(lifecycletest.Never)

func itoa(i int) string     { return itoa64(int64(i)) }
func itoa64(i int64) string { return strconv.FormatInt(i, 10) }
