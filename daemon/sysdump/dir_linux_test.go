package sysdump

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// hostileDir is a state dir someone prepared: a FIFO (opening it for
// reading would block for ever), a symlink to a secret outside the dir, a
// symlinked subdir, a socket, a sparse 1 GiB file, and one honest record.
func hostileDir(t *testing.T) (dir, secret string) {
	t.Helper()
	base := t.TempDir()
	dir = filepath.Join(base, "state")
	outside := filepath.Join(base, "outside")
	for _, d := range []string{dir, outside} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	secret = filepath.Join(outside, "secret")
	must(t, os.WriteFile(secret, []byte("outside-the-dir"), 0o600))
	must(t, unix.Mkfifo(filepath.Join(dir, "fifo.json"), 0o600))
	must(t, os.Symlink(secret, filepath.Join(dir, "link.json")))
	must(t, os.Symlink(outside, filepath.Join(dir, "linkdir")))
	l, err := net.Listen("unix", filepath.Join(dir, "sock"))
	must(t, err)
	t.Cleanup(func() { l.Close() })
	f, err := os.Create(filepath.Join(dir, "huge.json"))
	must(t, err)
	must(t, f.Truncate(1<<30))
	_, err = f.WriteAt([]byte("THE-END"), 1<<30-7)
	must(t, err)
	must(t, f.Close())
	must(t, os.WriteFile(filepath.Join(dir, "abc:eth0.json"), []byte(`{"containerID":"abc"}`), 0o600))
	return dir, secret
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// Every entry of the hostile dir is read or refused at once: regular files
// up to the cap, the rest named for what they are and never opened.
func TestDirReadsOnlyRegularFilesWithinTheCap(t *testing.T) {
	dir, _ := hostileDir(t)
	d, err := OpenDir("", dir)
	must(t, err)
	defer d.Close()
	names, more, err := d.Names(100)
	must(t, err)
	if more || len(names) != 6 {
		t.Fatalf("names %v (more %v)", names, more)
	}
	done := make(chan map[string]string)
	go func() {
		got := map[string]string{}
		for _, n := range names {
			f, err := d.Read(n, 1<<20, false)
			var nr *NotRegularError
			switch {
			case errors.As(err, &nr):
				got[n] = nr.Info.Kind
			case err != nil:
				got[n] = err.Error()
			default:
				got[n] = "read " + string(rune('0'+len(f.Data)/(1<<20)))
				if f.Truncated {
					got[n] += " truncated"
				}
				if strings.Contains(string(f.Data), "outside-the-dir") {
					got[n] += " OUTSIDE"
				}
			}
		}
		done <- got
	}()
	select {
	case got := <-done:
		want := map[string]string{"fifo.json": "fifo", "link.json": "symlink", "linkdir": "symlink", "sock": "socket",
			"huge.json": "read 1 truncated", "abc:eth0.json": "read 0"}
		for n, w := range want {
			if got[n] != w {
				t.Errorf("%s: %q, want %q", n, got[n], w)
			}
		}
	case <-time.After(20 * time.Second):
		// Not a timed assertion: a read of the FIFO blocks for ever.
		t.Fatal("reading the dir hung (a FIFO was opened?)")
	}
	if _, err := d.Sub("linkdir"); err == nil {
		t.Error("Sub followed a symlink out of the dir")
	}
	in, err := d.Lstat("link.json")
	must(t, err)
	if in.Kind != "symlink" || !strings.HasSuffix(in.Target, "outside/secret") {
		t.Errorf("Lstat(link.json) = %+v", in)
	}
}

// A log keeps its end.
func TestDirReadTailKeepsTheEnd(t *testing.T) {
	dir, _ := hostileDir(t)
	d, err := OpenDir("", dir)
	must(t, err)
	defer d.Close()
	f, err := d.Read("huge.json", 16, true)
	must(t, err)
	if string(f.Data) != strings.Repeat("\x00", 9)+"THE-END" || !f.Truncated {
		t.Errorf("tail: %q truncated %v", f.Data, f.Truncated)
	}
}

// A device node is never opened: its open may act (a tape rewinds).
func TestDirRefusesADevice(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to make a device node")
	}
	dir := t.TempDir()
	must(t, unix.Mknod(filepath.Join(dir, "null"), unix.S_IFCHR|0o600, int(unix.Mkdev(1, 3))))
	d, err := OpenDir("", dir)
	must(t, err)
	defer d.Close()
	var nr *NotRegularError
	if _, err := d.Read("null", 10, false); !errors.As(err, &nr) || nr.Info.Kind != "device" {
		t.Errorf("Read(device) = %v", err)
	}
}

// In the agent's root, an absolute symlink in the path resolves inside
// that root (as the agent sees it), and .. cannot climb out of it.
func TestOpenDirResolvesInTheAgentsRoot(t *testing.T) {
	root := t.TempDir()
	must(t, os.MkdirAll(filepath.Join(root, "run", "sluice", "state"), 0o700))
	must(t, os.MkdirAll(filepath.Join(root, "var"), 0o755))
	must(t, os.Symlink("/run", filepath.Join(root, "var", "run")))
	must(t, os.WriteFile(filepath.Join(root, "run", "sluice", "state", "inside"), []byte("in the root"), 0o600))
	d, err := OpenDir(root, "/var/run/sluice/state")
	if errors.Is(err, unix.ENOSYS) {
		t.Skip("openat2 needs Linux 5.6")
	}
	must(t, err)
	defer d.Close()
	f, err := d.Read("inside", 100, false)
	if err != nil || string(f.Data) != "in the root" {
		t.Errorf("read through the root: %q, %v", f.Data, err)
	}
	// A sibling of the root that a plain join of root and path reaches.
	sibling := t.TempDir()
	if _, err := OpenDir(root, "/../"+filepath.Base(sibling)); !errors.Is(err, unix.ENOENT) {
		t.Errorf("OpenDir(root, /../%s) = %v; want ENOENT: .. at the root stays there", filepath.Base(sibling), err)
	}
}
