package workloads

import (
	"context"
	"testing"

	"golang.org/x/sys/unix"
)

// readOnly remounts dir read-only (a bind mount of itself) until the test
// ends, so removing a file in it fails the way a broken disk does.
func readOnly(t *testing.T, dir string) {
	t.Helper()
	if err := unix.Mount(dir, dir, "", unix.MS_BIND, ""); err != nil {
		t.Fatalf("bind %s: %v", dir, err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	if err := unix.Mount("", dir, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
		t.Fatalf("remount %s read-only: %v", dir, err)
	}
}

// A DEL whose journal delete fails has still removed the table: the record
// must not be reasserted by the next resync onto the released pod.
func TestReleaseWithFailingJournalIsNotReasserted(t *testing.T) {
	f := newFixture(t)
	ns, r := f.enroll(t, "stuck")
	readOnly(t, f.state)
	f.store.Release(context.Background(), r.Attachment, ns.Path) // the error is the journal's
	if hasTable(t, ns) {
		t.Fatal("Release left the table")
	}
	if err := f.store.Reconcile(context.Background()); err != nil {
		t.Logf("reconcile: %v", err)
	}
	if hasTable(t, ns) {
		t.Fatal("resync re-applied the ruleset of a released attachment")
	}
	if got := f.store.List(); len(got) != 0 {
		t.Fatalf("released attachment still listed: %+v", got)
	}
	// Once the disk works again the leftover record is deleted.
	unix.Unmount(f.state, unix.MNT_DETACH)
	if err := f.store.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := f.open(t).List(); len(got) != 0 {
		t.Fatalf("journal still holds the released attachment: %+v", got)
	}
}
