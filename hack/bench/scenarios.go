package main

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/sluicemesh/sluice/test/harness/lifecycletest"
)

// The node suites that record the scenario counts, in the order they run:
// sluice's (its chart) and istio-cni's (Istio's chart) on the same kind of
// test cluster, filling one results file side by side.
var scenarioSuites = []struct{ cni, pkg string }{
	{cniSluice, "./test/lifecycle"},
	{cniIstio, "./test/peer"},
}

// scenarioResult is the node suites' counts. A suite that fails still
// records the counts it reached (a failing count fails its test), so a
// suite's error is reported beside the rows, not instead of them.
type scenarioResult struct {
	churn     time.Duration // the pace: a pod every churn across the cluster
	rows      lifecycleRows
	suiteErrs []string // suites that failed, and how
	err       error    // no counts at all, and why
}

// benchScenarios runs the node suites with the results file named by the
// env var the scenarios record their counts in. Smoke runs skip it: each
// suite starts a test cluster and takes minutes.
// benchRaceReboots is how many reboots racing the primary's conflist make
// bench runs for each CNI.
// benchBurstMaxPods is the rebooted node's maxPods in the reboot burst
// (test/lifecycle's TestRebootBurst; make test runs 40): the kubelet's
// default.
const (
	benchRaceReboots  = 50
	rebootRaceEnv     = "SLUICE_REBOOT_RACE_REBOOTS"
	benchBurstMaxPods = 110
	burstMaxPodsEnv   = "SLUICE_BURST_MAX_PODS"
)

func benchScenarios(root, tmp string, churn time.Duration, smoke bool, cl *cleanups) *scenarioResult {
	res := &scenarioResult{churn: churn}
	if smoke {
		res.err = fmt.Errorf("not run by -smoke (each node suite takes minutes)")
		return res
	}
	file := filepath.Join(tmp, "lifecycle-results.json")
	for _, s := range scenarioSuites {
		// 50 racing reboots a CNI (test/lifecycle's and test/peer's
		// racing-primary tests; make test runs 2): about half an hour each.
		if _, err := runGoTest(root, cl, s.pkg, []string{lifecycleResultsEnv + "=" + file,
			lifecycletest.ChurnIntervalEnv + "=" + churn.String(), rebootRaceEnv + "=" + strconv.Itoa(benchRaceReboots),
			burstMaxPodsEnv + "=" + strconv.Itoa(benchBurstMaxPods)},
			"-v", "-timeout", "150m"); err != nil {
			res.suiteErrs = append(res.suiteErrs, fmt.Sprintf("%s (%s): %v", s.pkg, s.cni, err))
		}
	}
	rows, err := loadLifecycleRows(file)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		res.err = fmt.Errorf("no suite recorded a count in $%s (%s)", lifecycleResultsEnv, strings.Join(res.suiteErrs, "; "))
	case err != nil:
		res.err = err
	}
	res.rows = rows
	return res
}

// comparison is a scenario's two rows, and every count on which sluice's
// is worse than istio-cni's.
type comparison struct {
	scenario       string
	sluice, istio  lifecycleCount
	recorded       bool // both rows there
	worse          []string
	sluiceOK, isOK bool
}

func (r *scenarioResult) compare() []comparison {
	var out []comparison
	for _, name := range scenarioNames {
		c := comparison{scenario: name}
		c.sluice, c.sluiceOK = r.rows.Find(cniSluice, name)
		c.istio, c.isOK = r.rows.Find(cniIstio, name)
		c.recorded = c.sluiceOK && c.isOK
		if c.recorded {
			c.worse = worseCounts(c.sluice, c.istio)
		}
		out = append(out, c)
	}
	return out
}

// worseCounts names each count on which s is worse than i: more pods
// uncaptured, failed or evicted, or a longer extra start delay (for a
// reboot, which has no baseline, the time to running again). No margin:
// a delay that is longer by a millisecond is worse.
func worseCounts(s, i lifecycleCount) []string {
	var w []string
	for _, c := range []struct {
		name string
		s, i int
	}{{"uncaptured", s.Uncaptured, i.Uncaptured}, {"failed", s.Failed, i.Failed}, {"evicted", s.Evicted, i.Evicted}} {
		if c.s > c.i {
			w = append(w, fmt.Sprintf("%s %d vs %d", c.name, c.s, c.i))
		}
	}
	sp50, sp99 := countDelay(s)
	ip50, ip99 := countDelay(i)
	if sp50 > ip50 {
		w = append(w, fmt.Sprintf("delay p50 %s vs %s", delayMS(sp50), delayMS(ip50)))
	}
	if sp99 > ip99 {
		w = append(w, fmt.Sprintf("delay p99 %s vs %s", delayMS(sp99), delayMS(ip99)))
	}
	return w
}

// delayMS is a delay in milliseconds, "never" for a percentile that
// fell on a pod that never started (lifecycletest.Never).
func delayMS(d time.Duration) string {
	if d == lifecycletest.Never {
		return "never"
	}
	return ms(d)
}

// delay is the row's extra start p50 and p99 over its baseline, or, for a
// reboot (no baseline), the reboot's start → running again; Never ranks
// after every finite delay, so it compares as the longest.
func countDelay(c lifecycleCount) (p50, p99 time.Duration) {
	if c.Scenario == lifecycletest.ScenarioReboot {
		return time.Duration(c.StartP50NS), time.Duration(c.StartP99NS)
	}
	return time.Duration(c.ExtraP50NS), time.Duration(c.ExtraP99NS)
}

// writeScenarioGoals is the side-by-side goal: sluice never worse than istio-cni.
func writeScenarioGoals(m *md, r *scenarioResult) {
	const goal = "sluice never worse than istio-cni on any count (uncaptured, failed, evicted, start delay; outage, upgrade, rollback, reboot, reboot racing the primary's conflist)"
	if r == nil || r.err != nil {
		m.p("| %s | not measured: %v | %s |", goal, scenarioErr(r), verdict(false))
		return
	}
	var worse, missing []string
	for _, c := range r.compare() {
		if !c.recorded {
			missing = append(missing, c.scenario)
		}
		for _, w := range c.worse {
			worse = append(worse, c.scenario+" "+w)
		}
	}
	var got []string
	if len(worse) > 0 {
		got = append(got, "worse on "+strings.Join(worse, ", "))
	} else {
		got = append(got, "no recorded count worse")
	}
	if len(missing) > 0 {
		got = append(got, "not recorded: "+strings.Join(missing, ", "))
	}
	m.p("| %s | %s (section 8) | %s |", goal, strings.Join(got, "; "), verdict(len(worse) == 0 && len(missing) == 0))
}

func scenarioErr(r *scenarioResult) error {
	if r == nil {
		return fmt.Errorf("not run")
	}
	return r.err
}

// writeScenarios is section 8's side-by-side table.
func writeScenarios(m *md, r *scenarioResult) {
	if r == nil || r.err != nil {
		m.p("Scenario counts not measured: `%v`", scenarioErr(r))
		m.p("")
		return
	}
	m.p("| scenario | CNI | pods | uncaptured | failed | evicted | extra start p50 | extra start p99 |")
	m.p("|---|---|---|---|---|---|---|---|")
	for _, c := range r.compare() {
		for _, row := range []struct {
			cni string
			c   lifecycleCount
			ok  bool
		}{{cniSluice, c.sluice, c.sluiceOK}, {cniIstio, c.istio, c.isOK}} {
			if !row.ok {
				m.p("| %s | %s | not recorded | | | | | |", c.scenario, row.cni)
				continue
			}
			p50, p99 := countDelay(row.c)
			m.p("| %s | %s | %d | %d | %d | %d | %s | %s |", c.scenario, row.cni, row.c.Pods,
				row.c.Uncaptured, row.c.Failed, row.c.Evicted, delayMS(p50), delayMS(p99))
		}
	}
	m.p("")
	m.p("The node suites, run by the harness one after the other with `%s` naming one file and a pod", lifecycleResultsEnv)
	m.p("created every %v across the two nodes (`-lifecycle-churn`, `$%s`):", r.churn, lifecycletest.ChurnIntervalEnv)
	m.p("`go test -v ./test/lifecycle` (sluice) and `go test -v ./test/peer` (istio-cni); the counts are defined")
	m.p("in `test/harness/lifecycletest`. Extra start is a phase's create → running over the same churn just")
	m.p("before it with no outage or rollout; for a reboot, which has no baseline, it is the reboot's start →")
	m.p("running again. A pod that failed for good or was evicted is counted in its column and, in the")
	m.p("delays, as never started (`never`), after every pod that started: leaving it out would let a CNI")
	m.p("whose pods fail show a shorter delay than one whose pods wait and start. The outage takes the first")
	m.p("node's agent away for %v. The reboot racing the primary's conflist runs %d reboots of a node with", lifecycletest.OutageHold, benchRaceReboots)
	m.p("%d mesh pods for each CNI, a stand-in primary rewriting its conflist every 200 ms from the node going", lifecycletest.RacePods)
	m.p("down until 3 s after the agent is Ready, and once more while the node runs (`$%s`; make test runs %d).", rebootRaceEnv, lifecycletest.RaceReboots)
	for _, sc := range []string{lifecycletest.ScenarioRebootRaceNRI, lifecycletest.ScenarioRebootBurst} {
		if c, ok := r.rows.Find(cniSluice, sc); ok {
			m.p("")
			m.p("sluice alone, %s: %d pods, %d uncaptured, %d failed (a burst's failed sandboxes included), %d evicted; %d probes, %d answered by an app.",
				sc, c.Pods, c.Uncaptured, c.Failed, c.Evicted, c.Probes, c.UncapturedProbes)
		}
	}
	m.p("")
	m.p("The reboot burst fills the first node to maxPods %d with mesh pods and reboots it (`$%s`; make test: %d).",
		benchBurstMaxPods, burstMaxPodsEnv, lifecycletest.BurstMaxPods)
	for _, e := range r.suiteErrs {
		m.p("")
		m.p("A suite failed (its counts above are what it recorded): `%s`", tail(e, 3))
	}
	m.p("")
}
