package kernel

import (
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/sluicemesh/sluice/test/harness/nstest"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/sluicemesh/sluice/daemon/redirect"
)

func listTable(t *testing.T, ns *nstest.NS) string {
	t.Helper()
	return ns.Run(t, "nft", "list", "table", "inet", redirect.TableName)
}

var elementsRE = regexp.MustCompile(`elements = \{([^}]*)\}`)

// canonical makes nft text comparable: nft wraps long element lists and
// lists hash-set elements in hash order, neither of which is meaning.
// Render's trailing comment lines (policy routes) are not nft's to list.
func canonical(text string) string {
	var kept []string
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, "#") {
			kept = append(kept, line)
		}
	}
	text = strings.Join(kept, "\n")
	text = elementsRE.ReplaceAllStringFunc(text, func(m string) string {
		inner := elementsRE.FindStringSubmatch(m)[1]
		var elems []string
		for _, e := range strings.Split(inner, ",") {
			elems = append(elems, strings.TrimSpace(e))
		}
		slices.Sort(elems)
		return "elements = { " + strings.Join(elems, ", ") + " }"
	})
	return strings.Join(strings.Fields(text), " ")
}

// TestKernelMatchesRender applies every golden ruleset and checks the
// kernel lists back exactly what Render says: the netlink encoding and the
// text are one description, not two that could drift apart.
func TestKernelMatchesRender(t *testing.T) {
	ns := nstest.New(t, "pod")
	h := ns.Handle(t)
	for name, spec := range redirect.Examples() {
		t.Run(name, func(t *testing.T) {
			r, err := redirect.Build(spec)
			if err != nil {
				t.Fatal(err)
			}
			if err := applyIn(h, r); err != nil {
				t.Fatalf("Apply: %v", err)
			}
			if got, want := canonical(listTable(t, ns)), canonical(r.Render()); got != want {
				t.Errorf("kernel listing differs from Render\nkernel: %s\nrender: %s", got, want)
			}
			drift, err := verifyIn(h, r)
			if err != nil || len(drift) > 0 {
				t.Errorf("Verify right after Apply: %q, %v", drift, err)
			}
		})
	}
}

func TestApplyIdempotent(t *testing.T) {
	ns := nstest.New(t, "pod")
	h := ns.Handle(t)
	r, err := redirect.Build(redirect.Examples()["outbound-cidrs"])
	if err != nil {
		t.Fatal(err)
	}
	if err := applyIn(h, r); err != nil {
		t.Fatal(err)
	}
	first := listTable(t, ns)
	if err := applyIn(h, r); err != nil {
		t.Fatalf("second Apply: %v", err)
	}
	if second := listTable(t, ns); second != first {
		t.Errorf("second Apply changed the table\nfirst:\n%s\nsecond:\n%s", first, second)
	}
	if drift, err := verifyIn(h, r); err != nil || len(drift) > 0 {
		t.Errorf("Verify after second Apply: %q, %v", drift, err)
	}
}

func TestApplyReplaces(t *testing.T) {
	ns := nstest.New(t, "pod")
	h := ns.Handle(t)
	wide, _ := redirect.Build(redirect.Examples()["outbound-cidrs"])
	plain, _ := redirect.Build(redirect.DefaultSpec())
	for _, r := range []*redirect.Ruleset{wide, plain} {
		if err := applyIn(h, r); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := canonical(listTable(t, ns)), canonical(plain.Render()); got != want {
		t.Errorf("after replacing, kernel has\n%s\nwant\n%s", got, want)
	}
}

func TestRemove(t *testing.T) {
	ns := nstest.New(t, "pod")
	h := ns.Handle(t)
	if err := removeIn(h); err != nil {
		t.Fatalf("Remove with no table: %v", err)
	}
	r, _ := redirect.Build(redirect.DefaultSpec())
	if err := applyIn(h, r); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if err := removeIn(h); err != nil {
			t.Fatalf("Remove #%d: %v", i+1, err)
		}
	}
	if out := ns.Run(t, "nft", "list", "tables"); strings.Contains(out, redirect.TableName) {
		t.Errorf("table still listed after Remove: %s", out)
	}
	if drift, err := verifyIn(h, r); err != nil || len(drift) != 2 || !strings.Contains(drift[0], "table inet sluice is missing") ||
		!strings.Contains(drift[1], "address ::6/128 on lo is missing") {
		t.Errorf("Verify after Remove: %q, %v", drift, err)
	}
}

// RemoveApplied, told what was applied, takes away all of it: an IPv4
// sidecar's table (rtnetlink never opened), an IPv6 one's table and ::6,
// TPROXY's table, rules and routes. What the ruleset it is told of never
// had, it does not read back: over a TPROXY netns, told of an IPv6
// sidecar's ruleset it leaves the rules and routes, told of an IPv4 one
// ::6 as well.
func TestRemoveApplied(t *testing.T) {
	v4 := redirect.DefaultSpec()
	v4.IPv6 = false
	tproxy := redirect.DefaultSpec()
	tproxy.Interception = redirect.InterceptTProxy
	for name, spec := range map[string]redirect.Spec{"IPv4": v4, "IPv6": redirect.DefaultSpec(), "TPROXY": tproxy} {
		t.Run(name, func(t *testing.T) {
			ns := nstest.New(t, "pod")
			r := mustApplyNS(t, ns, spec)
			if err := removeAppliedIn(ns.Handle(t), r); err != nil {
				t.Fatal(err)
			}
			if out := ns.Run(t, "nft", "list", "tables"); strings.Contains(out, redirect.TableName) {
				t.Errorf("table still listed: %s", out)
			}
			if ok, line := loHas6(t, ns); ok {
				t.Errorf("::6 outlived RemoveApplied: %s", line)
			}
			if left := oursListed(t, ns); left != "" {
				t.Errorf("rules and routes outlived RemoveApplied:\n%s", left)
			}
		})
	}
	for name, told := range map[string]struct {
		spec redirect.Spec
		has6 bool
	}{"told IPv6": {redirect.DefaultSpec(), false}, "told IPv4": {v4, true}} {
		t.Run(name, func(t *testing.T) {
			ns := nstest.New(t, "pod")
			mustApplyNS(t, ns, tproxy)
			r, _ := redirect.Build(told.spec)
			if err := removeAppliedIn(ns.Handle(t), r); err != nil {
				t.Fatal(err)
			}
			if oursListed(t, ns) == "" {
				t.Error("rules and routes were read back and removed")
			}
			if ok, _ := loHas6(t, ns); ok != told.has6 {
				t.Errorf("::6 on lo: %t, want %t", ok, told.has6)
			}
		})
	}
}

func TestRefusesUnopenedHandle(t *testing.T) {
	r, _ := redirect.Build(redirect.DefaultSpec())
	for _, h := range []int{0, -1} {
		if err := applyIn(netns.NsHandle(h), r); err == nil {
			t.Errorf("Apply to handle %d succeeded", h)
		}
	}
}

// ruleHandle finds a rule's handle in `nft -a` output by its comment.
func ruleHandle(t *testing.T, ns *nstest.NS, chain, tag string) string {
	t.Helper()
	out := ns.Run(t, "nft", "-a", "list", "chain", "inet", redirect.TableName, chain)
	m := regexp.MustCompile(`comment "` + regexp.QuoteMeta(tag) + `" # handle (\d+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no rule %q in chain %s:\n%s", tag, chain, out)
	}
	return m[1]
}

func TestVerifyDrift(t *testing.T) {
	ns := nstest.New(t, "pod")
	h := ns.Handle(t)
	spec := redirect.DefaultSpec()
	spec.CaptureDNS = true
	r, err := redirect.Build(spec)
	if err != nil {
		t.Fatal(err)
	}
	nft := func(t *testing.T, script string) {
		t.Helper()
		cmd := ns.Command("nft", "-f", "-")
		cmd.Stdin = strings.NewReader(script)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("nft -f: %v\n%s\n%s", err, script, out)
		}
	}
	for _, tc := range []struct {
		name  string
		drift func(t *testing.T)
		want  []string
	}{
		{"flushed chain", func(t *testing.T) { nft(t, "flush chain inet sluice outbound") },
			[]string{"chain outbound is empty (flushed?): all 14 rules missing"}},
		{"deleted table", func(t *testing.T) { nft(t, "delete table inet sluice") },
			[]string{"table inet sluice is missing"}},
		{"foreign rule", func(t *testing.T) { nft(t, "add rule inet sluice outbound tcp dport 9999 return") },
			[]string{`chain outbound: rule handle `, `is not part of the ruleset (comment "")`}},
		{"deleted rule", func(t *testing.T) {
			nft(t, "delete rule inet sluice outbound handle "+ruleHandle(t, ns, "outbound", "proxy-uid"))
		}, []string{`chain outbound: rule "proxy-uid" is missing: meta skuid 1337 return comment "proxy-uid"`}},
		{"modified rule", func(t *testing.T) {
			nft(t, "replace rule inet sluice out-redirect handle "+ruleHandle(t, ns, "out-redirect", "out-redirect")+
				` meta l4proto tcp redirect to :15999 comment "out-redirect"`)
		}, []string{`chain out-redirect: rule "out-redirect" (handle `, `) was modified, want: meta l4proto tcp redirect to :15001`}},
		{"reordered rules", func(t *testing.T) {
			handle := ruleHandle(t, ns, "dns", "dns-redirect-udp")
			nft(t, "delete rule inet sluice dns handle "+handle+"\n"+
				`insert rule inet sluice dns meta l4proto udp redirect to :15053 comment "dns-redirect-udp"`)
		}, []string{"chain dns: rules are out of order"}},
		{"missing chain", func(t *testing.T) {
			nft(t, "flush chain inet sluice output\nflush chain inet sluice outbound\ndelete chain inet sluice outbound")
		}, []string{"chain output is empty (flushed?)", "chain outbound is missing"}},
		{"extra chain", func(t *testing.T) { nft(t, "add chain inet sluice sneaky") },
			[]string{"chain sneaky is not part of the ruleset"}},
		{"set elements", func(t *testing.T) { nft(t, "add element inet sluice inbound-pass-ports { 9999 }") },
			[]string{"set inbound-pass-ports elements differ: 5 in the kernel, want 4"}},
		{"extra set", func(t *testing.T) { nft(t, "add set inet sluice sneaky { type ipv4_addr; }") },
			[]string{"set sneaky is not part of the ruleset"}},
		{"base chain changed", func(t *testing.T) {
			nft(t, "delete chain inet sluice prerouting\nadd chain inet sluice prerouting { type nat hook prerouting priority 100; policy accept; }")
		}, []string{"chain prerouting: is type nat hook 0 priority 100 policy 1, want type nat hook 0 priority -100 policy 1",
			"chain prerouting is empty"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := applyIn(h, r); err != nil {
				t.Fatal(err)
			}
			if drift, err := verifyIn(h, r); err != nil || len(drift) > 0 {
				t.Fatalf("Verify before drift: %q, %v", drift, err)
			}
			tc.drift(t)
			drift, err := verifyIn(h, r)
			if err != nil {
				t.Fatalf("Verify: %v", err)
			}
			all := strings.Join(drift, "\n")
			for _, w := range tc.want {
				if !strings.Contains(all, w) {
					t.Errorf("drift %q lacks %q", drift, w)
				}
			}
			// Apply repairs whatever was done.
			if err := applyIn(h, r); err != nil {
				t.Fatal(err)
			}
			if drift, err := verifyIn(h, r); err != nil || len(drift) > 0 {
				t.Errorf("Verify after re-Apply: %q, %v", drift, err)
			}
		})
	}
}

// threadNetNS names the calling thread's netns (its nsfs inode).
func threadNetNS() (string, error) {
	return os.Readlink(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
}

func TestApplyConcurrent(t *testing.T) {
	nstest.RequireRoot(t)
	hostBefore, err := exec.Command("nft", "list", "ruleset").CombinedOutput()
	if err != nil {
		t.Fatalf("nft list ruleset in the test's netns: %v\n%s", err, hostBefore)
	}
	r, err := redirect.Build(redirect.Examples()["outbound-cidrs"])
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	const n = 20
	pods := make([]*nstest.NS, n)
	for i := range pods {
		pods[i] = nstest.NewIn(t, dir, fmt.Sprintf("pod%d", i))
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i, p := range pods {
		h := p.Handle(t)
		wg.Go(func() {
			// Pin the goroutine so the thread it checks is the one Apply
			// ran on.
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			before, err := threadNetNS()
			if err != nil {
				errs[i] = err
				return
			}
			if err := applyIn(h, r); err != nil {
				errs[i] = err
				return
			}
			if after, _ := threadNetNS(); after != before {
				errs[i] = fmt.Errorf("calling thread moved from %s to %s", before, after)
			}
		})
	}
	wg.Wait()
	for i, p := range pods {
		if errs[i] != nil {
			t.Errorf("%s: %v", p.Name, errs[i])
			continue
		}
		if got, want := canonical(listTable(t, p)), canonical(r.Render()); got != want {
			t.Errorf("%s holds\n%s\nwant\n%s", p.Name, got, want)
		}
		if drift, err := verifyIn(p.Handle(t), r); err != nil || len(drift) > 0 {
			t.Errorf("%s: Verify: %q, %v", p.Name, drift, err)
		}
	}
	hostAfter, err := exec.Command("nft", "list", "ruleset").CombinedOutput()
	if err != nil {
		t.Fatal(err)
	}
	if string(hostAfter) != string(hostBefore) {
		t.Errorf("the test's own netns changed:\nbefore:\n%s\nafter:\n%s", hostBefore, hostAfter)
	}
}

func BenchmarkApply(b *testing.B) {
	ns := nstest.New(b, "pod")
	h := ns.Handle(b)
	r, err := redirect.Build(redirect.DefaultSpec())
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if err := applyIn(h, r); err != nil {
			b.Fatal(err)
		}
	}
}
