package redirect

import (
	"errors"
	"testing"

	"github.com/google/nftables"
	"golang.org/x/sys/unix"

	"github.com/sluicemesh/sluice/internal/nstest"
)

// TestApplyCreateRace walks the path Apply takes when the table appears
// between its GET and its batch: the exclusive create fails whole with
// EEXIST, and the replace that follows on the same socket lands the ruleset.
func TestApplyCreateRace(t *testing.T) {
	ns := nstest.New(t, "pod")
	h := ns.Handle(t)
	wide, _ := Build(goldenSpecs()["outbound-cidrs"])
	plain, _ := Build(DefaultSpec())
	if err := Apply(h, wide); err != nil {
		t.Fatal(err)
	}
	conn, err := dial(h, nftables.AsLasting())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.CloseLasting()
	if err := commit(conn, newProgram(plain), false); !errors.Is(err, unix.EEXIST) {
		t.Fatalf("exclusive create over an existing table: %v, want EEXIST", err)
	}
	if got, want := canonical(listTable(t, ns)), canonical(wide.Render()); got != want {
		t.Fatalf("failed batch changed the table:\n%s", got)
	}
	if err := commit(conn, newProgram(plain), true); err != nil {
		t.Fatalf("replace after EEXIST on the same socket: %v", err)
	}
	if got, want := canonical(listTable(t, ns)), canonical(plain.Render()); got != want {
		t.Errorf("after replace, kernel has\n%s\nwant\n%s", got, want)
	}
	if exists, err := tableExists(conn, nlTable(TableName)); err != nil || !exists {
		t.Errorf("tableExists = %t, %v", exists, err)
	}
}
