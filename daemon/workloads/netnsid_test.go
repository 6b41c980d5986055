package workloads

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluicemesh/sluice/test/harness/nstest"
)

// A /proc/<pid>/ns/net enrolment outlives its process when the netns does:
// the record follows the namespace, ztunnel keeps the pod, the table stays;
// only a namespace nothing holds is gone. Real processes, mounts and nft.

// holder is a process sleeping in a netns.
type holder struct{ cmd *exec.Cmd }

func holdIn(t *testing.T, netnsPath string) *holder {
	t.Helper()
	cmd := exec.Command("nsenter", "--net="+netnsPath, "--", "sleep", "300")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h := &holder{cmd}
	t.Cleanup(h.exit)
	want, err := os.Stat(netnsPath)
	if err != nil {
		t.Fatal(err)
	}
	nstest.Eventually(t, 5*time.Second, func() bool {
		got, err := os.Stat(h.path())
		return err == nil && os.SameFile(got, want)
	}, "%s never entered %s", h.path(), netnsPath)
	return h
}

func (h *holder) path() string { return "/proc/" + strconv.Itoa(h.cmd.Process.Pid) + "/ns/net" }

// exit kills the process and reaps it: its /proc entry is gone after.
func (h *holder) exit() {
	if h.cmd.ProcessState == nil {
		h.cmd.Process.Kill()
		h.cmd.Wait()
	}
}

// tableVia says whether the netns at path holds our table.
func tableVia(path string) bool {
	return exec.Command("nsenter", "--net="+path, "--", "nft", "list", "table", "inet", "sluice").Run() == nil
}

func bindMount(t *testing.T, src, dst string) {
	t.Helper()
	if err := os.WriteFile(dst, nil, 0o444); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(src, dst, "none", unix.MS_BIND, ""); err != nil {
		t.Fatalf("bind mount %s on %s: %v", src, dst, err)
	}
	t.Cleanup(func() { unix.Unmount(dst, unix.MNT_DETACH) })
}

// enrollByProc enrolls an ambient pod by the /proc path of a process in a
// fresh netns, and returns that process; the netns's own mount is gone.
func (f *ambientFixture) enrollByProc(t *testing.T, id string) (*holder, *nstest.NS, Record) {
	t.Helper()
	pod := nstest.NewIn(t, f.root, id)
	first := holdIn(t, pod.Path)
	r := ambientRecord(id, "eth0", "uid-"+id, "10.0.0.9/24", pod)
	r.Netns = first.path()
	if err := f.store.Enroll(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	return first, pod, r
}

func (f *ambientFixture) reconcile(t *testing.T) {
	t.Helper()
	if err := f.store.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestReconcileFollowsANetnsAnotherProcessHolds(t *testing.T) {
	f := newAmbientFixture(t)
	first, pod, r := f.enrollByProc(t, "held")
	second := holdIn(t, pod.Path)
	unix.Unmount(pod.Path, unix.MNT_DETACH) // only the processes hold it now
	first.exit()

	f.reconcile(t)
	got, ok := f.store.Get(r.Attachment)
	if !ok || f.zt.dels() != 0 || !tableVia(second.path()) {
		t.Fatalf("after the first process exited: record kept %v, ztunnel dels %d, table %v", ok, f.zt.dels(), tableVia(second.path()))
	}
	if got.Netns != second.path() {
		t.Errorf("record names %s, want the live process's %s", got.Netns, second.path())
	}
	if j := f.open(t).List(); len(j) != 1 || j[0].Netns != second.path() {
		t.Errorf("journal after the follow: %+v", j)
	}

	// The converse: the last holder goes, and so does the record.
	second.exit()
	f.reconcile(t)
	if _, ok := f.store.Get(r.Attachment); ok || f.zt.dels() != 1 {
		t.Fatalf("netns gone: record kept %v, ztunnel dels %d", ok, f.zt.dels())
	}
}

// A bind mount under the roots is a holder too: the record follows it.
func TestReconcileFollowsANetnsAMountHolds(t *testing.T) {
	f := newAmbientFixture(t)
	first, pod, r := f.enrollByProc(t, "mounted")
	first.exit()
	f.reconcile(t)
	got, ok := f.store.Get(r.Attachment)
	if !ok || f.zt.dels() != 0 || !hasTable(t, pod) {
		t.Fatalf("netns held by a mount: record kept %v, ztunnel dels %d, table %v", ok, f.zt.dels(), hasTable(t, pod))
	}
	if got.Netns != pod.Path {
		t.Errorf("record names %s, want the mount %s", got.Netns, pod.Path)
	}
}

// A mount outside the roots keeps the namespace alive, so the record
// stays (not reasserted, out of reach) until that mount goes too.
func TestReconcileKeepsANetnsHeldOutsideTheRoots(t *testing.T) {
	f := newAmbientFixture(t)
	first, pod, r := f.enrollByProc(t, "outside")
	elsewhere := filepath.Join(t.TempDir(), "ns")
	bindMount(t, pod.Path, elsewhere)
	unix.Unmount(pod.Path, unix.MNT_DETACH)
	first.exit()

	f.reconcile(t)
	if _, ok := f.store.Get(r.Attachment); !ok || f.zt.dels() != 0 || !tableVia(elsewhere) {
		t.Fatalf("netns held outside the roots: record kept %v, ztunnel dels %d, table %v", ok, f.zt.dels(), tableVia(elsewhere))
	}
	unix.Unmount(elsewhere, unix.MNT_DETACH)
	f.reconcile(t)
	if _, ok := f.store.Get(r.Attachment); ok || f.zt.dels() != 1 {
		t.Fatalf("netns gone: record kept %v, ztunnel dels %d", ok, f.zt.dels())
	}
}

// A DEL (or GC) of such an attachment removes the table where the netns
// lives now, before ztunnel hears Del: never a redirect left behind.
func TestReleaseFindsANetnsAnotherProcessHolds(t *testing.T) {
	f := newAmbientFixture(t)
	first, pod, r := f.enrollByProc(t, "released")
	second := holdIn(t, pod.Path)
	unix.Unmount(pod.Path, unix.MNT_DETACH)
	first.exit()
	tableAtDel := true
	f.zt.onDel = func() { tableAtDel = tableVia(second.path()) }
	if err := f.store.Release(context.Background(), r.Attachment, r.Netns); err != nil {
		t.Fatal(err)
	}
	if f.zt.dels() != 1 || tableAtDel || tableVia(second.path()) {
		t.Fatalf("release: ztunnel dels %d, table at Del %v, table after %v", f.zt.dels(), tableAtDel, tableVia(second.path()))
	}
}

// A DEL never blocks teardown: a netns no process is in, held only by a
// mount outside the roots, is released (its table, out of reach, stays
// with the mount).
func TestReleaseOfANetnsHeldOutsideTheRoots(t *testing.T) {
	f := newAmbientFixture(t)
	first, pod, r := f.enrollByProc(t, "held-del")
	elsewhere := filepath.Join(t.TempDir(), "ns")
	bindMount(t, pod.Path, elsewhere)
	unix.Unmount(pod.Path, unix.MNT_DETACH)
	first.exit()
	if err := f.store.Release(context.Background(), r.Attachment, r.Netns); err != nil {
		t.Fatalf("DEL of a netns held outside the roots: %v", err)
	}
	if _, ok := f.store.Get(r.Attachment); ok {
		t.Fatal("record kept after the DEL")
	}
}
