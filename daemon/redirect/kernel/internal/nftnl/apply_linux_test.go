package nftnl

import (
	"errors"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/nftables"
	"github.com/mdlayher/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/sluicemesh/sluice/daemon/redirect/nft"
	"github.com/sluicemesh/sluice/test/harness/nstest"
)

func listTable(t *testing.T, ns *nstest.NS, name string) string {
	t.Helper()
	return ns.Run(t, "nft", "list", "table", "inet", name)
}

var elementsRE = regexp.MustCompile(`elements = \{([^}]*)\}`)

// canonical makes nft text comparable: nft wraps long element lists and
// lists hash-set elements in hash order, neither of which is meaning.
func canonical(text string) string {
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

// TestKernelMatchesRender: the kernel lists back exactly what Render says
// and Verify finds no drift, for tables using the whole vocabulary.
func TestKernelMatchesRender(t *testing.T) {
	ns := nstest.New(t, "pod")
	h := ns.Handle(t)
	wide, plain := testTables()
	for i, tb := range []*nft.Table{wide, plain, wide} {
		existed, _, err := apply(h, tb)
		if err != nil {
			t.Fatalf("Apply #%d: %v", i+1, err)
		}
		if existed != (i > 0) {
			t.Errorf("Apply #%d: existed = %t", i+1, existed)
		}
		if got, want := canonical(listTable(t, ns, tb.Name)), canonical(tb.Render()); got != want {
			t.Errorf("Apply #%d: kernel listing differs from Render\nkernel: %s\nrender: %s", i+1, got, want)
		}
		if drift, err := verify(h, tb); err != nil || len(drift) > 0 {
			t.Errorf("Verify after Apply #%d: %q, %v", i+1, drift, err)
		}
	}
	for i := range 2 {
		if err := Remove(h, wide.Name); err != nil {
			t.Fatalf("Remove #%d: %v", i+1, err)
		}
	}
	if drift, err := verify(h, wide); err != nil || len(drift) != 1 || drift[0] != "table inet "+wide.Name+" is missing" {
		t.Errorf("Verify after Remove: %q, %v", drift, err)
	}
}

// TestApplyCreateRace walks the path Apply takes when the table appears
// between its GET and its batch: the exclusive create fails whole with
// EEXIST (one ACK asked, the error still arrives), and the replace that
// follows on a fresh socket lands the table.
func TestApplyCreateRace(t *testing.T) {
	ns := nstest.New(t, "pod")
	h := ns.Handle(t)
	wide, plain := testTables()
	if _, _, err := apply(h, wide); err != nil {
		t.Fatal(err)
	}
	send := func(replace bool) error {
		t.Helper()
		p := newProgram(plain)
		batch, err := marshal(func(c *nftables.Conn) error { return p.build(c, replace) })
		if err != nil {
			t.Fatal(err)
		}
		s := mustOpen(t, h)
		_, err = s.send(batch)
		return err
	}
	if err := send(false); !errors.Is(err, unix.EEXIST) {
		t.Fatalf("exclusive create over an existing table: %v, want EEXIST", err)
	}
	if got, want := canonical(listTable(t, ns, wide.Name)), canonical(wide.Render()); got != want {
		t.Fatalf("failed batch changed the table:\n%s", got)
	}
	if err := send(true); err != nil {
		t.Fatalf("replace after EEXIST: %v", err)
	}
	if got, want := canonical(listTable(t, ns, plain.Name)), canonical(plain.Render()); got != want {
		t.Errorf("after replace, kernel has\n%s\nwant\n%s", got, want)
	}
	s := mustOpen(t, h)
	if exists, err := s.tableExists(plain.Name); err != nil || !exists {
		t.Errorf("tableExists = %t, %v", exists, err)
	}
	if exists, err := s.tableExists("not-there"); err != nil || exists {
		t.Errorf("tableExists(not-there) = %t, %v", exists, err)
	}
}

// TestBatchErrorInTheMiddle: a batch whose failing message is neither the
// first nor the one carrying the ACK still fails whole, with the kernel's
// errno, and changes nothing.
func TestBatchErrorInTheMiddle(t *testing.T) {
	ns := nstest.New(t, "pod")
	h := ns.Handle(t)
	_, plain := testTables()
	p := newProgram(plain)
	batch, err := marshal(func(c *nftables.Conn) error {
		if err := p.build(c, false); err != nil {
			return err
		}
		// A rule in a chain that does not exist, then a valid one.
		c.AddRule(&nftables.Rule{Table: p.table, Chain: &nftables.Chain{Name: "no-such-chain", Table: p.table}})
		c.AddRule(p.rules[0])
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	s := mustOpen(t, h)
	if _, err := s.send(batch); !errors.Is(err, unix.ENOENT) {
		t.Fatalf("batch with a rule in a missing chain: %v, want ENOENT", err)
	}
	if out := ns.Run(t, "nft", "list", "tables"); strings.Contains(out, plain.Name) {
		t.Errorf("a failed batch left a table behind:\n%s", out)
	}
}

// Remove's delete asks for no echo: the kernel answers it with its ACK
// alone, not a notification per rule of the table deleted (which an echo
// on the DELTABLE costs, twice the delete's own CPU).
func TestRemoveBatchIsAnsweredByItsAckAlone(t *testing.T) {
	ns := nstest.New(t, "pod")
	h := ns.Handle(t)
	tb, _ := testTables()
	if _, _, err := apply(h, tb); err != nil {
		t.Fatal(err)
	}
	batch, err := removeBatches.batchFor(tb.Name)
	if err != nil {
		t.Fatal(err)
	}
	s := mustOpen(t, h)
	prepare(batch, false)
	sent, err := s.nl.SendMessages(batch)
	if err != nil {
		t.Fatal(err)
	}
	ack := sent[len(sent)-2].Header.Sequence
	var got []uint16
	for done := false; !done; {
		replies, err := s.nl.Receive()
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range replies {
			got = append(got, uint16(m.Header.Type))
			done = done || (m.Header.Type == netlink.Error && m.Header.Sequence == ack)
		}
	}
	if len(got) != 1 {
		t.Fatalf("the delete was answered with %d messages (types %#x), want its ACK alone", len(got), got)
	}
	if out := ns.Run(t, "nft", "list", "tables"); strings.Contains(out, tb.Name) {
		t.Errorf("table still listed: %s", out)
	}
}

// mustOpen is a netfilter socket in h, closed when the test ends.
func mustOpen(t *testing.T, h netns.NsHandle) *socket {
	t.Helper()
	s, err := open(h)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.nl.Close() })
	return s
}
