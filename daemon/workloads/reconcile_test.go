package workloads

import (
	"context"
	"errors"
	"testing"
	"time"
)

// paced spreads its calls over the span in groups at least minGap apart:
// the group that begins with call i starts no sooner than i/n of the span,
// the calls run in order, each once.
func TestPacedSpreadsTheWork(t *testing.T) {
	const span = 200 * time.Millisecond
	for _, c := range []struct {
		n      int
		minGap time.Duration
		group  int
	}{{5, 0, 1}, {5, 40 * time.Millisecond, 1}, {12, 40 * time.Millisecond, 3}} {
		start := time.Now()
		var at []time.Duration
		var order []int
		if err := paced(context.Background(), c.n, span, c.minGap, func(i int) {
			at = append(at, time.Since(start))
			order = append(order, i)
		}); err != nil {
			t.Fatal(err)
		}
		if len(order) != c.n {
			t.Fatalf("%+v: %d calls", c, len(order))
		}
		for i, d := range at {
			if order[i] != i {
				t.Fatalf("%+v: call %d was fn(%d)", c, i, order[i])
			}
			first := i - i%c.group // the call that began i's group
			if earliest := span * time.Duration(first) / time.Duration(c.n); d < earliest {
				t.Errorf("%+v: fn(%d) ran %v after the start, before its group's %v", c, i, d, earliest)
			}
		}
		// The last group starts late in the span: the calls were spread,
		// not run at once.
		if last := at[c.n-1]; last < span*time.Duration(c.n-c.group)/time.Duration(c.n) {
			t.Errorf("%+v: the last call ran %v after the start", c, last)
		}
	}
}

// paced stops with its context, between calls, and says why.
func TestPacedStopsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	ran := 0
	err := paced(ctx, 3, time.Hour, 0, func(int) { ran++; cancel() })
	if !errors.Is(err, context.Canceled) || ran != 1 {
		t.Fatalf("err %v after %d calls, want context.Canceled after 1", err, ran)
	}
}
