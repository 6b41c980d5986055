package workloads

import (
	"context"
	"os"
	"os/exec"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sluicemesh/sluice/test/harness/nstest"
)

// Another netns mounted at an enrolled pod's path ("the netns replaced
// under the same pod"): nothing is written to the new one; the pod's own,
// still held by its process, is followed and verified, counted once and
// told to OnNetnsReplaced; once nothing holds it, the record is dropped,
// counted too. Real netns, mounts, processes and nft.

type replacedCall struct{ path, followed string }

// replacedFixture is a fixture whose store tells what OnNetnsReplaced hears.
func replacedFixture(t *testing.T) (*fixture, *[]replacedCall) {
	t.Helper()
	f := newFixture(t)
	calls := &[]replacedCall{}
	s := f.open(t)
	s.onReplaced = func(r Record, followed string) { *calls = append(*calls, replacedCall{r.Netns, followed}) }
	f.store = s
	return f, calls
}

// mountOver mounts the netns at src over dst, hiding dst's own mount, as
// `mount --bind` onto a runtime's netns file does; undone at the end.
func mountOver(t *testing.T, src, dst string) {
	t.Helper()
	if err := unix.Mount(src, dst, "none", unix.MS_BIND, ""); err != nil {
		t.Fatalf("bind mount %s over %s: %v", src, dst, err)
	}
	t.Cleanup(func() { unix.Unmount(dst, unix.MNT_DETACH) })
}

func (f *fixture) resync(t *testing.T, full bool) {
	t.Helper()
	if err := f.store.resyncPass(context.Background(), 0, full); err != nil {
		t.Fatal(err)
	}
}

func TestVerifyFollowsThePodsNetnsWhenItsPathIsReplaced(t *testing.T) {
	f, calls := replacedFixture(t)
	pod, r := f.enroll(t, "replaced")
	proc := holdIn(t, pod.Path) // the pod's process
	other := nstest.NewIn(t, f.root, "intruder")
	mountOver(t, other.Path, pod.Path)

	f.resync(t, false)
	got, ok := f.store.Get(r.Attachment)
	if !ok || !samePathNetns(got.Netns, proc.path()) {
		t.Fatalf("after the replacement: record kept %v, names %q; want a path to the pod's own netns (%s)", ok, got.Netns, proc.path())
	}
	if n := f.store.NetnsReplaced(); n[ReplacedFollowed] != 1 || n[ReplacedDropped] != 0 {
		t.Errorf("NetnsReplaced() = %v, want followed 1", n)
	}
	if len(*calls) != 1 || (*calls)[0] != (replacedCall{pod.Path, got.Netns}) {
		t.Errorf("OnNetnsReplaced heard %+v, want once (%s, %s)", *calls, pod.Path, got.Netns)
	}
	if tableVia(pod.Path) || hasTable(t, other) {
		t.Fatal("a table was written to the netns mounted at the pod's path")
	}
	if !tableVia(proc.path()) {
		t.Fatal("the pod's own netns lost its table")
	}

	// Still verified where it is: a flush of the pod's own ruleset is
	// restored there, never in the new netns, and not counted again.
	if out, err := exec.Command("nsenter", "--net="+proc.path(), "--", "nft", "flush", "ruleset").CombinedOutput(); err != nil {
		t.Fatalf("flush the pod's own ruleset: %v: %s", err, out)
	}
	f.resync(t, false)
	if f.store.Reasserts() != 1 || !tableVia(proc.path()) || tableVia(pod.Path) {
		t.Fatalf("flush of the followed netns: reasserts %d, table there %v, in the new netns %v",
			f.store.Reasserts(), tableVia(proc.path()), tableVia(pod.Path))
	}
	if n := f.store.NetnsReplaced(); n[ReplacedFollowed] != 1 || len(*calls) != 1 {
		t.Errorf("counted again on the next pass: %v, %d calls", n, len(*calls))
	}
}

func TestVerifyDropsARecordWhosePathIsReplacedAndOwnNetnsUnheld(t *testing.T) {
	f, calls := replacedFixture(t)
	pod, r := f.enroll(t, "replaced-unheld")
	other := nstest.NewIn(t, f.root, "intruder")
	mountOver(t, other.Path, pod.Path) // the pod's own mount, hidden, is all that holds it

	f.resync(t, false)
	if _, ok := f.store.Get(r.Attachment); ok {
		t.Fatal("record kept though nothing reachable holds its netns")
	}
	if n := f.store.NetnsReplaced(); n[ReplacedDropped] != 1 || n[ReplacedFollowed] != 0 {
		t.Errorf("NetnsReplaced() = %v, want dropped 1", n)
	}
	if len(*calls) != 1 || (*calls)[0] != (replacedCall{pod.Path, ""}) {
		t.Errorf("OnNetnsReplaced heard %+v, want once (%s, \"\")", *calls, pod.Path)
	}
	if hasTable(t, other) {
		t.Fatal("a table was written to the netns mounted at the pod's path")
	}
}

// A path that is only gone (the pod's sandbox torn down) is no
// replacement: dropped, not counted.
func TestVerifyDoesNotCountAGoneNetnsAsReplaced(t *testing.T) {
	f, calls := replacedFixture(t)
	pod, _ := f.enroll(t, "gone")
	unix.Unmount(pod.Path, unix.MNT_DETACH)
	os.Remove(pod.Path)
	f.resync(t, false)
	if n := f.store.NetnsReplaced(); n[ReplacedDropped] != 0 || len(*calls) != 0 || len(f.store.List()) != 0 {
		t.Errorf("a gone netns: NetnsReplaced() = %v, calls %+v, records %d", n, *calls, len(f.store.List()))
	}
}

// samePathNetns says whether paths a and b name one namespace.
func samePathNetns(a, b string) bool {
	sa, err := os.Stat(a)
	if err != nil {
		return false
	}
	sb, err := os.Stat(b)
	return err == nil && os.SameFile(sa, sb)
}
