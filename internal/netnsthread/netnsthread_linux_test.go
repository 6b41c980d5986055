package netnsthread

import (
	"errors"
	"os"
	"testing"

	"github.com/vishvananda/netns"

	"github.com/sluicemesh/sluice/test/harness/nstest"
)

// fn runs in the namespace given, and the calling goroutine's namespace
// is the same before and after.
func TestDoRunsInTheNamespace(t *testing.T) {
	nstest.RequireRoot(t)
	pod := nstest.New(t, "pod")
	h := pod.Handle(t)
	before, err := os.Readlink("/proc/thread-self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	var inside string
	if err := Do(h, func() error {
		var err error
		inside, err = os.Readlink("/proc/thread-self/ns/net")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if want := pod.Name; inside == before {
		t.Fatalf("fn ran in the caller's netns %s, not in %s", inside, want)
	}
	if after, _ := os.Readlink("/proc/thread-self/ns/net"); after != before {
		t.Fatalf("the caller's thread moved: %s, then %s", before, after)
	}
	wantErr := errors.New("fn failed")
	if err := Do(h, func() error { return wantErr }); !errors.Is(err, wantErr) {
		t.Fatalf("Do returned %v, want fn's error", err)
	}
	if err := Do(netns.NsHandle(-1), func() error { t.Error("fn ran"); return nil }); err == nil {
		t.Fatal("Do into a closed handle: no error")
	}
}

// The netns Do moves its threads back to is the one the test's own
// threads are in, however many times Do has run.
func TestDoMovesBackHome(t *testing.T) {
	nstest.RequireRoot(t)
	pod := nstest.New(t, "pod")
	for range 3 {
		if err := Do(pod.Handle(t), func() error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	h, err := homeNS()
	if err != nil {
		t.Fatal(err)
	}
	mine, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer mine.Close()
	if !h.Equal(mine) {
		t.Fatalf("Do moves threads back to %s, the test runs in %s", h.UniqueId(), mine.UniqueId())
	}
}
