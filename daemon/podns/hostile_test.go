package podns

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluicemesh/sluice/test/harness/nstest"
)

// openWithin runs Open in the background and reports whether it answered
// within d; a blocked open is unblocked by cleanup (a writer on the FIFO).
func openWithin(t *testing.T, o *Opener, path string, d time.Duration) (error, bool) {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		h, err := o.Open(path)
		if err == nil {
			h.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		return err, true
	case <-time.After(d):
		return nil, false
	}
}

// A FIFO where the netns should be: opening it for reading would block
// until a writer comes, holding the caller's lock and slot forever. It is
// refused at once instead.
func TestOpenRefusesFIFOWithoutBlocking(t *testing.T) {
	nstest.RequireRoot(t)
	root := t.TempDir()
	fifo := filepath.Join(root, "fifo")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Release an Open still blocked on it (the code before the fix).
		if fd, err := unix.Open(fifo, unix.O_WRONLY|unix.O_NONBLOCK, 0); err == nil {
			unix.Close(fd)
		}
	})
	o, err := NewOpener([]string{root}, "/proc")
	if err != nil {
		t.Fatal(err)
	}
	err, answered := openWithin(t, o, fifo, 3*time.Second)
	if !answered {
		t.Fatal("Open of a FIFO blocked")
	}
	var re *RuleError
	if !errors.As(err, &re) {
		t.Fatalf("Open(FIFO) = %v, want a RuleError", err)
	}
}

// OpenContext answers by the caller's deadline, and a cancelled call does
// not start.
func TestOpenContextHonoursTheDeadline(t *testing.T) {
	nstest.RequireRoot(t)
	root := t.TempDir()
	pod := nstest.NewIn(t, root, "pod")
	o, err := NewOpener([]string{root}, "/proc")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := o.OpenContext(ctx, pod.Path); !errors.Is(err, context.Canceled) {
		t.Fatalf("OpenContext(cancelled) = %v", err)
	}
	h, err := o.OpenContext(context.Background(), pod.Path)
	if err != nil {
		t.Fatal(err)
	}
	h.Close()
}

// A path component swapped between a directory under the root and a
// symlink out of it, while the agent opens the path: no open may ever land
// in the namespace outside the root.
func TestOpenCannotBeRacedOutOfTheRoot(t *testing.T) {
	nstest.RequireRoot(t)
	root, outsideDir := t.TempDir(), t.TempDir()
	if err := os.Mkdir(filepath.Join(root, "a"), 0o700); err != nil {
		t.Fatal(err)
	}
	nstest.NewIn(t, filepath.Join(root, "a"), "pod")
	outside := nstest.NewIn(t, outsideDir, "pod")
	var outsideSt unix.Stat_t
	if err := unix.Stat(outside.Path, &outsideSt); err != nil {
		t.Fatal(err)
	}
	a, b := filepath.Join(root, "a"), filepath.Join(root, "b")
	if err := os.Symlink(outsideDir, b); err != nil {
		t.Fatal(err)
	}
	o, err := NewOpener([]string{root}, "/proc")
	if err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	swapped := make(chan struct{})
	go func() {
		defer close(swapped)
		for !stop.Load() {
			unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_EXCHANGE)
		}
	}()
	defer func() {
		stop.Store(true)
		<-swapped
		// Put the directory back where nstest will unmount its pod.
		if fi, err := os.Lstat(a); err == nil && fi.Mode()&os.ModeSymlink != 0 {
			if err := unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_EXCHANGE); err != nil {
				t.Errorf("restore %s: %v", a, err)
			}
		}
	}()
	deadline := time.Now().Add(3 * time.Second)
	for n := 0; n < 20000 && time.Now().Before(deadline); n++ {
		h, err := o.Open(filepath.Join(a, "pod"))
		if err != nil {
			continue
		}
		var st unix.Stat_t
		unix.Fstat(int(h), &st)
		h.Close()
		if st.Ino == outsideSt.Ino && st.Dev == outsideSt.Dev {
			t.Fatalf("open %d of %s landed in %s, outside the root", n, filepath.Join(a, "pod"), outside.Path)
		}
	}
}

// The walk used without openat2 refuses every symlink and every escape.
func TestWalkBeneath(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "d"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "d", "f"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("d", filepath.Join(root, "l")); err != nil {
		t.Fatal(err)
	}
	rfd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(rfd)
	fd, err := walkBeneath(rfd, "d/f")
	if err != nil {
		t.Fatalf("walk d/f: %v", err)
	}
	unix.Close(fd)
	for rel, want := range map[string]error{"l/f": unix.ELOOP, "l": unix.ELOOP, "../x": unix.EXDEV, "d/f/x": unix.ENOTDIR, "nope": unix.ENOENT} {
		if fd, err := walkBeneath(rfd, rel); !errors.Is(err, want) {
			if err == nil {
				unix.Close(fd)
			}
			t.Errorf("walk %s = %v, want %v", rel, err, want)
		}
	}
}
