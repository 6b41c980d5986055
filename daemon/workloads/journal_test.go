package workloads

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// A journal file far larger than any record is moved aside unread: a
// restart must not load (or choke on) whatever was put there.
func TestJournalReadIsCapped(t *testing.T) {
	f := newFixture(t)
	big := filepath.Join(f.state, "big:eth0.json")
	// A valid record padded past the cap: only the cap keeps it out.
	rec := `{"containerID":"big","ifName":"eth0","netns":"/nowhere"}`
	if err := os.WriteFile(big, append([]byte(rec), bytes.Repeat([]byte(" "), maxRecordBytes)...), 0o600); err != nil {
		t.Fatal(err)
	}
	s := f.open(t)
	if len(s.List()) != 0 {
		t.Fatalf("oversize record loaded: %+v", s.List())
	}
	if _, err := os.Stat(big + ".corrupt"); err != nil {
		t.Fatalf("oversize record not moved aside: %v", err)
	}
}

// A state dir emptied under a running agent is written again by the next
// Reconcile: the kernel state is still ours, and a restart must know it.
func TestReconcileRewritesLostJournal(t *testing.T) {
	f := newFixture(t)
	_, r := f.enroll(t, "lost")
	if err := os.RemoveAll(f.state); err != nil {
		t.Fatal(err)
	}
	_, r2 := f.enroll(t, "after") // recreates the dir
	if _, err := os.Stat(filepath.Join(f.state, stateMarker)); err != nil {
		t.Errorf("the recreated state dir is not marked sluice's: %v", err)
	}
	if err := f.store.Reconcile(t.Context()); err != nil {
		t.Fatal(err)
	}
	got := f.open(t).List()
	if len(got) != 2 || got[0].Attachment != r2.Attachment || got[1].Attachment != r.Attachment {
		t.Fatalf("journal after the state dir was lost: %+v", got)
	}
}
