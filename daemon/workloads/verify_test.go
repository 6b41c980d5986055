package workloads

import (
	"context"
	"fmt"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluicemesh/sluice/daemon/redirect"
)

// A verify pass restores a flushed table; a change the generation does not
// show (here: the record is told the post-flush generation, as a netns
// whose counter came back to the recorded number would) is missed by the
// cheap pass and caught by the full one.
func TestVerifyPassCheapAndFull(t *testing.T) {
	f := newFixture(t)
	ns, r := f.enroll(t, "lost")
	ns.Run(t, "nft", "flush", "table", "inet", "sluice")
	if err := f.store.resyncPass(context.Background(), 0, false); err != nil {
		t.Fatal(err)
	}
	if f.store.Reasserts() != 1 || !hasFullTable(t, f.store, r) {
		t.Fatalf("cheap pass after a flush: reasserts %d", f.store.Reasserts())
	}

	ns.Run(t, "nft", "flush", "table", "inet", "sluice")
	rs, err := redirect.Build(r.Spec)
	if err != nil {
		t.Fatal(err)
	}
	_, gen, err := f.store.kernel.VerifySince(redirect.Netns(ns.Handle(t)), rs, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.store.setGen(r.Attachment, gen, false)
	if err := f.store.resyncPass(context.Background(), 0, false); err != nil {
		t.Fatal(err)
	}
	if f.store.Reasserts() != 1 {
		t.Fatalf("cheap pass read a table whose generation had not moved: reasserts %d", f.store.Reasserts())
	}
	if err := f.store.resyncPass(context.Background(), 0, true); err != nil {
		t.Fatal(err)
	}
	if f.store.Reasserts() != 2 || !hasFullTable(t, f.store, r) {
		t.Fatalf("full pass missed a flushed table: reasserts %d", f.store.Reasserts())
	}
}

func hasFullTable(t *testing.T, s *Store, r Record) bool {
	t.Helper()
	d, err := s.Verify(s.List()[0])
	if err != nil {
		t.Fatal(err)
	}
	return len(d) == 0
}

// BenchmarkVerifyPass250 is one cheap verify pass over 250 enrolled pods
// nobody touched, back to back. cpu-ms/pass is the agent's CPU (user and
// system, so the kernel's share of the netlink work counts); core-%@5s is
// that over the default --verify-interval: DESIGN's budget is 1 % of one
// core at 250 pods.
func BenchmarkVerifyPass250(b *testing.B) {
	f := newFixture(b)
	for i := range 250 {
		f.enroll(b, fmt.Sprintf("pod-%03d", i))
	}
	ctx := context.Background()
	// The first pass journals each record's generation, as the first pass
	// after the ADDs does in the agent.
	if err := f.store.resyncPass(ctx, 0, false); err != nil {
		b.Fatal(err)
	}
	before := cpuTime(b)
	b.ResetTimer()
	for b.Loop() {
		if err := f.store.resyncPass(ctx, 0, false); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	perPass := (cpuTime(b) - before) / time.Duration(b.N)
	b.ReportMetric(float64(perPass.Microseconds())/1000, "cpu-ms/pass")
	b.ReportMetric(100*perPass.Seconds()/5, "core-%@5s")
	if f.store.Reasserts() != 0 {
		b.Fatalf("untouched pods reasserted %d times", f.store.Reasserts())
	}
}

func cpuTime(b *testing.B) time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
