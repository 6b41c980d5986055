package main

import (
	"fmt"
	"runtime"
	"slices"
	"strings"
	"time"
)

func ratio(a, b time.Duration) float64 {
	if b <= 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// perADD is d spread over n calls, in ms.
func perADD(d time.Duration, n int) float64 {
	if n == 0 {
		return 0
	}
	return float64(d.Microseconds()) / 1000 / float64(n)
}

// writeGoals is the speed goals, each a ratio or a bound from this run.
func writeGoals(m *md, c config, r *results) {
	sc, st, k := r.scale, r.storms, r.kube
	row := func(goal, measured string, ok bool) { m.p("| %s | %s | %s |", goal, measured, verdict(ok)) }
	m.p("## Results against the goals")
	m.p("")
	m.p("| goal | measured | |")
	m.p("|---|---|---|")
	sa := ratio(sc.sluiceAdd.p50(), sc.loopback.p50())
	row("ADD p50, standalone ≤ 1.5× loopback", fmt.Sprintf("%.2f× (%s vs %s)", sa, ms(sc.sluiceAdd.p50()), ms(sc.loopback.p50())), sa <= 1.5)
	ka := ratio(k.sluice.p50(), k.loopback.p50())
	row("ADD p50, Kubernetes mode ≤ 1.5× loopback", fmt.Sprintf("%.2f× (%s vs %s)", ka, ms(k.sluice.p50()), ms(k.loopback.p50())), ka <= 1.5)
	extra := k.sluice.p50() - k.standalone.p50()
	row("Kubernetes mode adds ≤ 1 ms over standalone (interleaved, section 3)", fmt.Sprintf("%+.2f ms (%s vs %s)", float64(extra.Microseconds())/1000, ms(k.sluice.p50()), ms(k.standalone.p50())), extra <= time.Millisecond)
	for _, s := range []struct {
		name string
		lo   *stormResult
		sl   *stormResult
	}{{"quiet", st.quiet.loopback, st.quiet.sluice}, {"CPU hog on one core", st.hogged.loopback, st.hogged.sluice}} {
		tr := s.sl.addRate() / s.lo.addRate()
		row(fmt.Sprintf("%d simultaneous ADDs, %s: throughput ≥ 0.8× loopback (%d storms each, pooled)", c.churn, s.name, st.rounds),
			fmt.Sprintf("%.2f× (%.0f vs %.0f ADD/s)", tr, s.sl.addRate(), s.lo.addRate()), tr >= 0.8)
		p99 := ratio(s.sl.add.p99(), s.lo.add.p99())
		row(fmt.Sprintf("… ADD p99 ≤ 2× loopback (%s)", s.name), fmt.Sprintf("%.2f× (%s vs %s)", p99, ms(s.sl.add.p99()), ms(s.lo.add.p99())), p99 <= 2)
		dr := s.sl.delRate() / s.lo.delRate()
		row(fmt.Sprintf("%d simultaneous DELs, %s: throughput ≥ 0.8× loopback (%d storms each, pooled)", c.churn, s.name, st.rounds),
			fmt.Sprintf("%.2f× (%.0f vs %.0f DEL/s)", dr, s.sl.delRate(), s.lo.delRate()), dr >= 0.8)
		dp99 := ratio(s.sl.del.p99(), s.lo.del.p99())
		row(fmt.Sprintf("… DEL p99 ≤ 2× loopback (%s)", s.name), fmt.Sprintf("%.2f× (%s vs %s)", dp99, ms(s.sl.del.p99()), ms(s.lo.del.p99())), dp99 <= 2)
		row(fmt.Sprintf("… 0 errors, ADD and DEL (%s)", s.name), fmt.Sprintf("%d sluice, %d loopback; %d DELs past the plugin's deadline", s.sl.errors, s.lo.errors, s.sl.leftover),
			s.sl.errors == 0 && s.sl.leftover == 0)
	}
	cpu := perADD(st.quiet.sluice.addCPU.process, len(st.quiet.sluice.add.d))
	row("agent CPU per ADD ≤ 1 ms (user + sys over the quiet storm ÷ ADDs)", fmt.Sprintf("%.2f ms", cpu), cpu <= 1)
	if k.istioErr != nil || len(k.istioNFT.d) == 0 {
		row("Kubernetes-mode ADD p50 ≥ 10× faster than istio-cni nftables", fmt.Sprintf("not measured: %v", k.istioErr), false)
	} else {
		in := ratio(k.istioNFT.p50(), k.sluice.p50())
		row("Kubernetes-mode ADD p50 ≥ 10× faster than istio-cni nftables", fmt.Sprintf("%.1f× (%s vs %s)", in, ms(k.sluice.p50()), ms(k.istioNFT.p50())), in >= 10)
		ii := ratio(k.istioIPT.p50(), k.sluice.p50())
		m.p("| (for reference) … than istio-cni iptables | %.1f× (%s vs %s) | |", ii, ms(k.sluice.p50()), ms(k.istioIPT.p50()))
	}
	nft := ratio(r.rules[1].p50(), r.rules[0].p50())
	row("rule programming ≥ 10× faster than `nft -f`", fmt.Sprintf("%.1f× (%s vs %s)", nft, ms(r.rules[0].p50()), ms(r.rules[1].p50())), nft >= 10)
	ipt := ratio(r.rules[2].p50(), r.rules[0].p50())
	row("rule programming ≥ 20× faster than `iptables-restore` (v4 + v6)", fmt.Sprintf("%.1f× (%s vs %s)", ipt, ms(r.rules[0].p50()), ms(r.rules[2].p50())), ipt >= 20)
	const mib = 1 << 20
	row(fmt.Sprintf("%d pods: agent RSS ≤ 64 MiB", sc.pods), fmt.Sprintf("%.1f MiB (peak %.1f MiB)", float64(sc.rssKiB)/1024, float64(sc.hwmKiB)/1024), sc.rssKiB*1024 <= 64*mib)
	sr := ratio(sc.addLarge.p50(), sc.addSmall.p50())
	row(fmt.Sprintf("ADD p50 at %d pods ≤ 1.2× at %d", sc.pods, sc.small), fmt.Sprintf("%.2f× (%s vs %s)", sr, ms(sc.addLarge.p50()), ms(sc.addSmall.p50())), sr <= 1.2)
	if len(sc.loLarge.d) > 0 && len(sc.loSmall.d) > 0 {
		lr := ratio(sc.loLarge.p50(), sc.loSmall.p50())
		m.p("| (for reference) loopback's ADD p50 beside those probes, %d pods vs %d | %.2f× (%s vs %s) | |",
			sc.pods, sc.small, lr, ms(sc.loLarge.p50()), ms(sc.loSmall.p50()))
	}
	row(fmt.Sprintf("restart → ready, %d journaled pods verified against the kernel, ≤ 2 s", sc.pods), ms(sc.restart), sc.restart <= 2*time.Second)
	share := 100 * sc.resyncCPU.Seconds() / sc.resyncInterval.Seconds()
	row(fmt.Sprintf("resync of %d pods ≤ 10 %% of one core over the interval", sc.pods),
		fmt.Sprintf("%.1f %% (%s CPU in %s)", share, ms(sc.resyncCPU), sc.resyncInterval), share <= 10)
	writeBurstGoals(m, k.burst)
	writeVerifyGoal(row, r.verify)
	writeNRIGoals(m, r.nri)
	writeLifecycleGoals(m, r.lifecycle)
	m.p("")
	m.p("Each goal's range over several runs, and what bounds those closest to their line, with the profiles")
	m.p("that show it (sections 5 and 6), are at the end:")
	m.p("[The goals run to run, and what bounds them](#the-goals-run-to-run-and-what-bounds-them).")
	m.p("")
}

// writeDetails is every row the goals come from, the plots and the
// profiles.
func writeDetails(m *md, c config, r *results) {
	sc, st, k, pr, fp := r.scale, r.storms, r.kube, r.profile, r.footprint
	m.p("## Details")
	m.p("")
	m.table("1. Rule programming per pod, each in a fresh netns", r.rules...)
	m.p("sluice is `redirect.Build` + `kernel.Netlink.Apply` of `redirect.DefaultSpec()` in-process (what the agent")
	m.p("does per pod). `nft -f` loads `Render()` of the same ruleset and the iptables tools load the")
	m.p("istio-iptables-equivalent rules for the default sidecar (see `hack/bench/rules.go`), each exec'd as")
	m.p("`nsenter --net=PATH TOOL FILE`, as peers run them; `iptables-restore` is the sum of the v4 and v6 runs.")
	m.p("The replace row is a second Apply into the same netns (a retried ADD, a repair).")
	m.p("")
	m.p("![rule programming latency](benchmarks/rules.svg)")
	m.p("")
	m.table("2. ADD through libcni, standalone agent, one at a time", sc.loopback, sc.sluiceAdd, r.disk, sc.chain)
	m.p("loopback and sluice ADD alternate pod by pod in fresh netns. sluice: libcni execs `sluice` with a")
	m.p("prevResult → gRPC over the unix socket → agent (policy, journal, netlink) → result → libcni. The")
	m.p("journal is on tmpfs (the default `--state-dir` under /var/run); the disk row puts it on disk (fsyncs).")
	m.p("")
	if r.tracing != nil {
		writeTracing(m, r.tracing)
	}
	m.table("3. Kubernetes mode: the same API-server pods through each plugin", k.loopback, k.standalone, k.sluice, k.istioNFT, k.istioIPT)
	if k.istioErr != nil {
		m.p("istio-cni was not measured: `%v`", k.istioErr)
		m.p("")
	}
	m.p("Each pod is ADDed by each plugin in turn, each in a fresh netns, the plugin that goes first rotating")
	m.p("pod by pod. istio-cni runs in sidecar mode as its")
	m.p("installer configures it (`cni_agent_run_dir` with `istio-cni-kubeconfig`, `exclude_namespaces`,")
	m.p("`native_nftables` false and true); it GETs the pod from the API server and execs `iptables-restore` or")
	m.p("`nft` in the pod's netns. sluice reads the pod from its informer cache; the harness has asked the agent")
	m.p("(Debug.Explain, over one connection kept for the section) that the pod is there before the first plugin's")
	m.p("ADD. Both agents keep their journals on tmpfs, as the default `--state-dir` under /var/run is on a node.")
	m.p("The node netns holds kube-proxy's base chains: on a machine where no netns has a netfilter hook, the first")
	m.p("capture after the last one went costs ~1 ms more (the kernel patches the hooks' static keys, with an IPI to")
	m.p("every CPU), and each of these ADDs, in a netns removed after it, would pay that; a node never does.")
	m.p("")
	m.p("![ADD latency](benchmarks/add.svg)")
	m.p("")
	writeBurst(m, k.burst)
	writeStorms(m, c, st)
	writeProfile(m, pr, fp)
	m.table(fmt.Sprintf("6. Scale: %d enrolled pods", sc.pods), sc.addSmall, sc.addLarge, sc.loSmall, sc.loLarge, sc.delAll)
	m.p("The ADDs with %d pods enrolled run twice, while the pods are added and again once the DELs are down", sc.small)
	m.p("to that many; those with %d enrolled run twice too, once all are added and again a resync interval later.", sc.pods)
	m.p("Each row pools its two rounds: the machine's drift over the section, and whatever it does during one")
	m.p("round of a few seconds, fall on both rows. Each probe is followed by loopback's ADD in the same netns:")
	m.p("what the node itself (the kernel with that many netns, this machine at that moment) does to any plugin.")
	m.p("Agent RSS with %d pods enrolled: %.1f MiB (VmHWM %.1f MiB); after a restart and reconcile: %.1f MiB.",
		sc.pods, float64(sc.rssKiB)/1024, float64(sc.hwmKiB)/1024, float64(sc.rssAfterRestartKiB)/1024)
	m.p("Restart (exec of the agent → Status answers ready, journal of %d pods verified against the kernel): %s.", sc.pods, ms(sc.restart))
	m.p("Resync: %s of agent CPU over one %s interval with %d pods enrolled and no calls (%.2f ms per record).",
		ms(sc.resyncCPU), sc.resyncInterval, sc.pods, perADD(sc.resyncCPU, sc.pods))
	m.p("")
	if len(sc.restartTop) > 0 {
		m.p("CPU profile of the restart (the `sluicebench` build, exec to ready), per journaled record:")
		m.p("")
		writeHops(m, "record", restartHops, sc.restartTop, sc.pods)
	} else {
		m.p("The restart was too short for the agent's CPU profile (100 Hz) to take a sample.")
		m.p("")
	}
	writeNRI(m, r.nri)
	writeLifecycle(m, r.lifecycle)
	writeFleet(m, r.fleet)
}

// writeProfile is section 5: where an ADD's CPU goes, agent and plugin.
func writeProfile(m *md, pr *profile, fp *footprint) {
	m.p("### 5. Where an ADD's time goes")
	m.p("")
	if pr.perfErr != nil {
		m.p("The agent's CPU profile failed: `%v`", pr.perfErr)
		m.p("")
	} else {
		m.p("A pprof CPU profile of the agent (the `sluicebench` build of the same code) over storms of %d", pr.adds)
		m.p("ADDs and %d DELs in all: CPU under each function, callees included, per call. The agent's CPU per", pr.adds)
		m.p("ADD over the storms' ADD halves was %.2f ms (/proc).", perADD(pr.agentCPU, pr.adds))
		m.p("")
		writeHops(m, "call", hops, pr.agentTop, pr.adds)
		m.p("Largest self costs in the agent:")
		m.p("")
		m.p("| self | symbol |")
		m.p("|---|---|")
		for _, l := range topSelf(pr.agentTop, 15) {
			m.p("| %.1f %% | `%s` |", l.self, l.symbol)
		}
		m.p("")
	}
	m.p("The plugin process: CPU per exec (user + sys from rusage, p50 of %d each, interleaved):", 100)
	m.p("")
	m.p("| binary | CPU per exec | exec wall p50 (VERSION) |")
	m.p("|---|---|---|")
	wall := map[string]time.Duration{}
	for i, name := range []string{"hello", "sluice", "loopback"} {
		if i < len(fp.execs) {
			wall[name] = fp.execs[i].p50()
		}
	}
	for _, name := range []string{"hello", "loopback", "sluice", "sluice GOMAXPROCS=1"} {
		w := "—"
		if d, ok := wall[name]; ok {
			w = ms(d)
		}
		m.p("| %s | %s | %s |", map[string]string{"hello": "Go hello-world", "loopback": "loopback ADD", "sluice": "sluice ADD",
			"sluice GOMAXPROCS=1": "sluice ADD, GOMAXPROCS=1 in its env"}[name], ms(pr.pluginCPU[name]), w)
	}
	m.p("")
	writePluginProfile(m, pr)
	m.p("`strace -f -c` of one sluice ADD (the plugin process and its threads):")
	m.p("")
	m.p("```")
	m.p("%s", pr.straceTable)
	m.p("```")
	m.p("")
	if len(fp.inits) > 0 {
		m.p("Package inits in `sluice` (`GODEBUG=inittrace=1`, non-runtime): %d packages.", len(fp.inits))
		m.p("")
	}
}

// writeHops is a profile's table by hop: CPU under each, per unit (n of
// them in the profile), and its share.
func writeHops(m *md, unit string, hs []struct{ name, prefix string }, lines []perfLine, n int) {
	m.p("| hop | CPU per %s | share of the profile |", unit)
	m.p("|---|---|---|")
	for _, h := range hs {
		if l, ok := hop(lines, h.prefix); ok {
			m.p("| %s | %.3f ms | %.1f %% |", h.name, perADD(l.cum, n), l.children)
		} else {
			m.p("| %s | too small to show | |", h.name)
		}
	}
	m.p("")
}

// writePluginProfile is the plugin's main by function: shares of its own
// samples, as the runtime's start and the package inits precede it.
func writePluginProfile(m *md, pr *profile) {
	if pr.pluginErr != nil {
		m.p("The plugin's CPU profile failed: `%v`", pr.pluginErr)
		m.p("")
		return
	}
	m.p("A CPU profile of the plugin's `main` (the `sluicebench` build, 10 kHz, merged over the execs above),")
	m.p("as shares of its samples; the runtime's start and the package inits run before it (inittrace below):")
	m.p("")
	m.p("| hop | share of the profile |")
	m.p("|---|---|")
	for _, h := range pluginHops {
		if l, ok := hop(pr.pluginTop, h.prefix); ok {
			m.p("| %s | %.1f %% |", h.name, l.children)
		} else {
			m.p("| %s | too small to show |", h.name)
		}
	}
	m.p("")
}

func topSelf(lines []perfLine, n int) []perfLine {
	out := make([]perfLine, 0, n)
	used := map[int]bool{}
	for range n {
		best := -1
		for i, l := range lines {
			if !used[i] && (best < 0 || l.self > lines[best].self) {
				best = i
			}
		}
		if best < 0 {
			break
		}
		used[best] = true
		out = append(out, lines[best])
	}
	return out
}

// cpuSplit is a storm half's CPU per operation, the machine's and its parts.
func cpuSplit(c cpuTimes, n int) string {
	return fmt.Sprintf("%.1f ms: plugin execs %.2f ms, the agent %.2f ms, libcni (this process) %.2f ms, irq + softirq %.2f ms, the rest %.2f ms",
		perADD(c.machine, n), perADD(c.children, n), perADD(c.process, n), perADD(c.self, n), perADD(c.irq, n),
		perADD(c.machine-c.children-c.process-c.self-c.irq, n))
}

// writeStorms is section 4: the storms, pooled over their rounds, and the
// spread a single storm would have shown.
func writeStorms(m *md, c config, st *storms) {
	m.table(fmt.Sprintf("4. Storms: %d simultaneous ADDs, then %d simultaneous DELs, %d storms of each", c.churn, c.churn, st.rounds),
		named(st.quiet.loopback.add, "loopback ADD, quiet"), named(st.quiet.sluice.add, "sluice ADD, quiet"),
		named(st.quiet.loopback.del, "loopback DEL, quiet"), named(st.quiet.sluice.del, "sluice DEL, quiet"),
		named(st.hogged.loopback.add, "loopback ADD, hog"), named(st.hogged.sluice.add, "sluice ADD, hog"),
		named(st.hogged.loopback.del, "loopback DEL, hog"), named(st.hogged.sluice.del, "sluice DEL, hog"))
	for _, s := range []struct {
		name string
		r    *stormResult
	}{{"loopback, quiet", st.quiet.loopback}, {"sluice, quiet", st.quiet.sluice}, {"loopback, hog", st.hogged.loopback}, {"sluice, hog", st.hogged.sluice}} {
		m.p("- %s: ADD %s wall in all (%.0f/s), DEL %s wall in all (%.0f/s), errors %d, attachments left after the DELs %d; CPU per ADD of the whole machine (other work on it included) %s; per DEL %s.",
			s.name, ms(s.r.addWall), s.r.addRate(), ms(s.r.delWall), s.r.delRate(), s.r.errors, s.r.leftover,
			cpuSplit(s.r.addCPU, len(s.r.add.d)), cpuSplit(s.r.delCPU, len(s.r.del.d)))
		if s.r.firstErr != nil {
			m.p("  first error: `%v`", s.r.firstErr)
		}
	}
	for _, p := range []struct {
		name string
		p    stormPair
	}{{"quiet", st.quiet}, {"hog", st.hogged}} {
		m.p("- sluice's throughput over loopback's, storm by storm, %s: ADD %s; DEL %s.", p.name, ratios(p.p.addRatios), ratios(p.p.delRatios))
	}
	m.p("")
	m.p("Each round runs a loopback storm and a sluice storm, the one that goes first swapped every round, each")
	m.p("started once the machine has settled (the kernel frees the last storm's namespaces in the background);")
	m.p("the table pools every call of the %d storms, and throughput is all calls over all their walls.", st.rounds)
	m.p("The hog is a shell loop pinned to CPU 0 (`taskset -c 0`) of %d. The loopback storms run against the", runtime.NumCPU())
	m.p("same agent process, so the agent's CPU over them is its idle cost.")
	m.p("")
	m.p("![storm latency](benchmarks/storm.svg)")
	m.p("")
}

// ratios is a list of ratios with their range, for a spread.
func ratios(rs []float64) string {
	if len(rs) == 0 {
		return "none"
	}
	parts := make([]string, len(rs))
	for i, r := range rs {
		parts[i] = fmt.Sprintf("%.2f", r)
	}
	return fmt.Sprintf("%s× (%.2f–%.2f)", strings.Join(parts, ", "), slices.Min(rs), slices.Max(rs))
}
