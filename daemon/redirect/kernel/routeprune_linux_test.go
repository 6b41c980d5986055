package kernel

import (
	"strings"
	"testing"

	"github.com/sluicemesh/sluice/daemon/redirect"
	"github.com/sluicemesh/sluice/test/harness/nstest"
)

// oursListed is every ip rule and route of ours (proto 115) in ns, both
// families, as ip prints them.
func oursListed(t *testing.T, ns *nstest.NS) string {
	t.Helper()
	var b strings.Builder
	for _, fam := range []string{"-4", "-6"} {
		for _, l := range strings.Split(ns.Run(t, "ip", fam, "rule", "list"), "\n") {
			if strings.Contains(l, "proto 115") {
				b.WriteString(l + "\n")
			}
		}
		b.WriteString(ns.Run(t, "ip", fam, "route", "show", "table", "all", "proto", "115"))
	}
	return b.String()
}

// A replace that no longer wants policy routes, and Remove, take away every
// rule and route of ours in both families, and Verify names it, also when
// one alone is left (the quick look, anyOurs, must see each kind); others'
// stay.
func TestPolicyRoutesPruned(t *testing.T) {
	tproxy := redirect.DefaultSpec()
	tproxy.Interception = redirect.InterceptTProxy
	ns := nstest.New(t, "pod")
	mustApplyNS(t, ns, tproxy)
	if oursListed(t, ns) == "" {
		t.Fatal("no rules or routes of ours after a TPROXY Apply")
	}
	mustApplyNS(t, ns, redirect.DefaultSpec())
	if left := oursListed(t, ns); left != "" {
		t.Errorf("TPROXY's rules and routes outlived it:\n%s", left)
	}
	ns.Run(t, "ip", "-6", "rule", "add", "fwmark", "0x7", "lookup", "77", "pref", "777") // not ours
	for _, lone := range [][]string{
		{"-4", "rule", "add", "fwmark", "0x1", "lookup", "133", "proto", "115"},
		{"-6", "rule", "add", "fwmark", "0x1", "lookup", "133", "proto", "115"},
		{"-4", "route", "add", "local", "0.0.0.0/0", "dev", "lo", "table", "133", "proto", "115"},
		{"-6", "route", "add", "local", "::/0", "dev", "lo", "table", "133", "proto", "115"},
	} {
		r := mustApplyNS(t, ns, redirect.DefaultSpec())
		ns.Run(t, "ip", lone...)
		if drift, err := verifyIn(ns.Handle(t), r); err != nil || len(drift) != 1 || !strings.Contains(drift[0], "is not part of the ruleset") {
			t.Errorf("ip %s: Verify says %q, %v", strings.Join(lone, " "), drift, err)
		}
		mustApplyNS(t, ns, redirect.DefaultSpec())
		if left := oursListed(t, ns); left != "" {
			t.Errorf("ip %s: the replace left it:\n%s", strings.Join(lone, " "), left)
		}
		ns.Run(t, "ip", lone...)
		if err := removeIn(ns.Handle(t)); err != nil {
			t.Fatal(err)
		}
		if left := oursListed(t, ns); left != "" {
			t.Errorf("ip %s: Remove left it:\n%s", strings.Join(lone, " "), left)
		}
	}
	if out := ns.Run(t, "ip", "-6", "rule", "list"); !strings.Contains(out, "lookup 77") {
		t.Errorf("a rule that is not ours went:\n%s", out)
	}
}
