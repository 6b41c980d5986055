package nftnl

import (
	"testing"

	"github.com/sluicemesh/sluice/test/harness/nstest"
)

// TestVerifySinceGeneration: Apply reports the generation its commit
// made; VerifySince at that generation skips reading the table back, and
// any later change (a rule flushed with nft, a set element added, the
// table deleted) moves the generation on so the table is read and the
// drift named.
func TestVerifySinceGeneration(t *testing.T) {
	tb, _ := testTables()
	for _, tc := range []struct {
		name   string
		tamper []string // nft arguments run in the pod's netns
	}{
		{"chain flushed", []string{"flush", "chain", "inet", tb.Name, tb.Chains[0].Name}},
		{"table deleted", []string{"delete", "table", "inet", tb.Name}},
		{"another table added", []string{"add", "table", "ip", "other"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := nstest.New(t, "pod")
			h := ns.Handle(t)
			_, gen, err := apply(h, tb)
			if err != nil {
				t.Fatal(err)
			}
			if gen == 0 {
				t.Fatal("Apply reported no generation: the kernel sent no NEWGEN for the echo on BATCH_BEGIN")
			}
			drift, got, err := verifySince(h, tb, gen)
			if err != nil || len(drift) > 0 || got != gen {
				t.Fatalf("VerifySince at Apply's generation %d: drift %q, generation %d, %v", gen, drift, got, err)
			}
			ns.Run(t, "nft", tc.tamper...)
			drift, got, err = verifySince(h, tb, gen)
			if err != nil {
				t.Fatal(err)
			}
			if got == gen {
				t.Errorf("the generation stayed %d after %q", gen, tc.tamper)
			}
			wantDrift := tc.name != "another table added"
			if (len(drift) > 0) != wantDrift {
				t.Errorf("after %q: drift %q, want drift: %t", tc.tamper, drift, wantDrift)
			}
			// Without a generation the table is always read.
			if d2, _, err := verifySince(h, tb, 0); err != nil || (len(d2) > 0) != wantDrift {
				t.Errorf("VerifySince(0): %q, %v", d2, err)
			}
		})
	}
}

// Remove sends its delete without looking first; for a table that is not
// there the kernel refuses the batch whole, so nothing is committed: the
// generation a record keeps for another table does not move.
func TestRemoveOfAnAbsentTableCommitsNothing(t *testing.T) {
	tb, _ := testTables()
	ns := nstest.New(t, "pod")
	h := ns.Handle(t)
	_, gen, err := apply(h, tb)
	if err != nil {
		t.Fatal(err)
	}
	if err := Remove(h, tb.Name+"-absent"); err != nil {
		t.Fatalf("Remove of an absent table: %v", err)
	}
	if drift, got, err := verifySince(h, tb, gen); err != nil || len(drift) > 0 || got != gen {
		t.Errorf("after removing an absent table: generation %d (Apply's %d), drift %q, %v", got, gen, drift, err)
	}
}
