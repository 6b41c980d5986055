package kernel

import (
	"io"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/sluicemesh/sluice/test/harness/nstest"

	"github.com/sluicemesh/sluice/daemon/redirect"
)

// holdOwnedTable makes table inet sluice in ns owned by another netlink
// socket (`flags owner`, held by an interactive nft the test runs): the
// kernel refuses every other socket's change to it, so the next Apply's
// batch fails for real. The table goes when that nft exits, at the end of
// the (sub)test. google/nftables cannot set table flags, hence nft.
func holdOwnedTable(t *testing.T, ns *nstest.NS) {
	t.Helper()
	cmd := exec.Command("nsenter", "--net="+ns.Path, "nft", "-i")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start nft -i: %v", err)
	}
	t.Cleanup(func() {
		stdin.Close()
		cmd.Wait()
	})
	if _, err := io.WriteString(stdin, "add table inet "+redirect.TableName+" { flags owner; }\n"); err != nil {
		t.Fatal(err)
	}
	nstest.Eventually(t, 5*time.Second, func() bool {
		out, _ := exec.Command("nsenter", "--net="+ns.Path, "nft", "list", "table", "inet", redirect.TableName).CombinedOutput()
		return strings.Contains(string(out), "flags owner")
	}, "table inet %s owned by nft -i", redirect.TableName)
}

func listRoutes(t *testing.T, ns *nstest.NS, table string) string {
	t.Helper()
	var b strings.Builder
	for _, fam := range []string{"-4", "-6"} {
		b.WriteString(ns.Run(t, "ip", fam, "rule", "list"))
		// table all: a table that was never used does not exist to show.
		for _, line := range strings.Split(ns.Run(t, "ip", fam, "route", "show", "table", "all"), "\n") {
			if strings.Contains(line, "table "+table+" ") || strings.HasSuffix(line, "table "+table) {
				b.WriteString(line + "\n")
			}
		}
	}
	return b.String()
}

// TestFailedApplyLeavesNoRoutes: an ambient (or TPROXY) Apply whose nft
// batch fails takes back the ip rules and routes it added before it, and
// keeps those that were there already.
func TestFailedApplyLeavesNoRoutes(t *testing.T) {
	tproxy := redirect.DefaultSpec()
	tproxy.Interception = redirect.InterceptTProxy
	for name, tc := range map[string]struct {
		spec  redirect.Spec
		table string
	}{"ambient": {redirect.DefaultAmbientSpec(), "100"}, "tproxy": {tproxy, "133"}} {
		t.Run(name, func(t *testing.T) {
			ns := nstest.New(t, "pod")
			before := listRoutes(t, ns, tc.table)
			r, err := redirect.Build(tc.spec)
			if err != nil {
				t.Fatal(err)
			}
			// The owned table lives as long as the subtest.
			t.Run("fresh netns", func(t *testing.T) {
				holdOwnedTable(t, ns)
				if err := applyIn(ns.Handle(t), r); err == nil {
					t.Fatal("Apply over a table another socket owns succeeded")
				}
				if after := listRoutes(t, ns, tc.table); after != before {
					t.Errorf("a failed Apply left routes behind:\nbefore:\n%s\nafter:\n%s", before, after)
				}
			})
			// Routes an earlier, successful Apply installed stay when a
			// later one fails.
			if err := applyIn(ns.Handle(t), r); err != nil {
				t.Fatal(err)
			}
			applied := listRoutes(t, ns, tc.table)
			if err := nftDelete(ns); err != nil {
				t.Fatal(err)
			}
			holdOwnedTable(t, ns)
			if err := applyIn(ns.Handle(t), r); err == nil {
				t.Fatal("Apply over a table another socket owns succeeded")
			}
			if after := listRoutes(t, ns, tc.table); after != applied {
				t.Errorf("a failed Apply took routes it had not added:\nbefore:\n%s\nafter:\n%s", applied, after)
			}
		})
	}
}

func nftDelete(ns *nstest.NS) error {
	return ns.Do(func() error {
		conn, err := nftables.New()
		if err != nil {
			return err
		}
		conn.DelTable(&nftables.Table{Name: redirect.TableName, Family: nftables.TableFamilyINet})
		return conn.Flush()
	})
}

// TestFailedApplyLeavesNoAddress: a sidecar Apply whose nft batch fails
// takes back the ::6 it put on lo, and leaves one the pod had already.
func TestFailedApplyLeavesNoAddress(t *testing.T) {
	r, err := redirect.Build(redirect.DefaultSpec())
	if err != nil {
		t.Fatal(err)
	}
	for _, podHad := range []bool{false, true} {
		ns := nstest.New(t, "pod")
		if podHad {
			ns.Run(t, "ip", "-6", "addr", "add", "::6/128", "dev", "lo")
		}
		holdOwnedTable(t, ns)
		if err := applyIn(ns.Handle(t), r); err == nil {
			t.Fatal("Apply over a table another socket owns succeeded")
		}
		if has, line := loHas6(t, ns); has != podHad {
			t.Errorf("pod had ::6 before: %t; after the failed Apply: %t %s", podHad, has, line)
		}
	}
}
