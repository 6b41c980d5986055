package workloads

import (
	"context"
	"errors"
	"testing"
	"time"
)

// paced spreads its calls over the span: call i starts no sooner than i/n
// of it, in order, each once.
func TestPacedSpreadsTheWork(t *testing.T) {
	const n, span = 5, 200 * time.Millisecond
	start := time.Now()
	var at []time.Duration
	var order []int
	if err := paced(context.Background(), n, span, func(i int) {
		at = append(at, time.Since(start))
		order = append(order, i)
	}); err != nil {
		t.Fatal(err)
	}
	if len(order) != n {
		t.Fatalf("%d calls, want %d", len(order), n)
	}
	for i, d := range at {
		if order[i] != i {
			t.Fatalf("call %d was fn(%d)", i, order[i])
		}
		if earliest := span * time.Duration(i) / n; d < earliest {
			t.Errorf("fn(%d) ran %v after the start, before %v", i, d, earliest)
		}
	}
}

// paced stops with its context, between calls, and says why.
func TestPacedStopsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	ran := 0
	err := paced(ctx, 3, time.Hour, func(int) { ran++; cancel() })
	if !errors.Is(err, context.Canceled) || ran != 1 {
		t.Fatalf("err %v after %d calls, want context.Canceled after 1", err, ran)
	}
}

// A resync pass verifies every record, reasserts drift and drops a record
// whose netns is gone, as the start-up reconcile does, over its span.
func TestUnitResyncPassReassertsAndDrops(t *testing.T) {
	u := newUnit(t)
	_, tampered := u.enroll(t, "tampered")
	gone, _ := u.enroll(t, "gone")
	u.ns.Delete(gone.Netns)
	u.kernel.Tamper(tampered)
	s := u.open(t)
	if err := s.resyncPass(context.Background(), 50*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if s.Reasserts() != 1 {
		t.Errorf("reasserts = %d, want 1", s.Reasserts())
	}
	if got := s.List(); len(got) != 1 || got[0].ContainerID != "tampered" {
		t.Errorf("records after the pass: %+v", got)
	}
}
