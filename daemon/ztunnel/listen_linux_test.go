package ztunnel

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netns"
)

func emptyConfig(path string) Config {
	return Config{
		Path:     path,
		Snapshot: func() []Workload { return nil },
		Open:     func(string) (netns.NsHandle, error) { return netns.None(), os.ErrNotExist },
		Logger:   testLogger(),
	}
}

func TestSocketIsRootOnly(t *testing.T) {
	path := filepath.Join(shortTempDir(t), "run", "ztunnel", "ztunnel.sock")
	s, err := New(emptyConfig(path))
	if err != nil {
		t.Fatal(err)
	}
	defer s.ln.Close()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Type() != os.ModeSocket || fi.Mode().Perm() != 0o600 {
		t.Errorf("socket mode %v, want a socket with 0600", fi.Mode())
	}
	di, err := os.Stat(filepath.Dir(path))
	if err != nil {
		t.Fatal(err)
	}
	if di.Mode().Perm() != 0o755 {
		t.Errorf("created socket dir mode %v, want 0755", di.Mode().Perm())
	}
}

func TestStaleSocketIsReplaced(t *testing.T) {
	path := filepath.Join(shortTempDir(t), "ztunnel.sock")
	dead, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	dead.SetUnlinkOnClose(false) // as a killed agent leaves it
	dead.Close()

	s, err := New(emptyConfig(path))
	if err != nil {
		t.Fatalf("New over a stale socket: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	defer func() { cancel(); <-done }()
	z := connectZtunnel(t, path)
	if got := kinds(z.snapshot()); !slices.Equal(got, []string{"snapshot_sent"}) {
		t.Errorf("snapshot %v", got)
	}
}

func TestLiveSocketIsNotTakenOver(t *testing.T) {
	path := filepath.Join(shortTempDir(t), "ztunnel.sock")
	first, err := New(emptyConfig(path))
	if err != nil {
		t.Fatal(err)
	}
	defer first.ln.Close()
	_, err = New(emptyConfig(path))
	if err == nil || !strings.Contains(err.Error(), "another agent is serving") {
		t.Fatalf("second New on a live socket: %v", err)
	}
	if _, err := os.Lstat(path); err != nil {
		t.Errorf("live socket removed: %v", err)
	}
}

func TestNonSocketIsNeverRemoved(t *testing.T) {
	path := filepath.Join(shortTempDir(t), "ztunnel.sock")
	if err := os.WriteFile(path, []byte("keep me"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := New(emptyConfig(path)); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Fatalf("New over a regular file: %v", err)
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != "keep me" {
		t.Errorf("file changed: %q, %v", b, err)
	}
}

func TestConfigNeedsSnapshotAndOpen(t *testing.T) {
	path := filepath.Join(shortTempDir(t), "ztunnel.sock")
	for name, mutate := range map[string]func(*Config){
		"snapshot": func(c *Config) { c.Snapshot = nil },
		"open":     func(c *Config) { c.Open = nil },
	} {
		cfg := emptyConfig(path)
		mutate(&cfg)
		if _, err := New(cfg); err == nil || !strings.Contains(strings.ToLower(err.Error()), name) {
			t.Errorf("New without %s: %v", name, err)
		}
	}
}

// The path is removed on exit while it names this server's socket, and
// never once someone else's socket took its place (the net package's
// unlink-on-close removed whatever the path named).
func TestExitRemovesOnlyOurSocket(t *testing.T) {
	// No check listens again between the removal and the other's bind.
	h := start(t, func(c *Config) { c.SocketCheck = time.Hour })
	if ok, why := h.srv.SocketOurs(); !ok {
		t.Fatalf("SocketOurs() = false (%s) with the socket in place", why)
	}
	if err := os.Remove(h.path); err != nil {
		t.Fatal(err)
	}
	if ok, why := h.srv.SocketOurs(); ok || !strings.Contains(why, "not ours any more") {
		t.Fatalf("SocketOurs() = %v %q with the socket removed", ok, why)
	}
	other, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: h.path, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if ok, _ := h.srv.SocketOurs(); ok {
		t.Fatal("SocketOurs() = true with another socket at the path")
	}
	if err := h.stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(h.path); err != nil {
		t.Fatalf("the server removed another's socket on exit: %v", err)
	}

	mine := start(t, nil)
	if err := mine.stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(mine.path); err == nil {
		t.Fatal("the server left its own socket behind on exit")
	}
}

// The socket's directory must be the agent's own: one others may write to,
// one another uid owns, or a symlink is refused, and left as it was.
func TestSharedSocketDirRefused(t *testing.T) {
	base := shortTempDir(t)
	for _, c := range []struct {
		name, want string
		make       func(dir string) error
	}{
		{"world-writable", "writable by group or others", func(dir string) error {
			if err := os.Mkdir(dir, 0o700); err != nil {
				return err
			}
			return os.Chmod(dir, os.ModeSticky|0o777)
		}},
		{"another uid's", "owned by uid 65534", func(dir string) error {
			if err := os.Mkdir(dir, 0o755); err != nil {
				return err
			}
			return os.Chown(dir, 65534, 65534)
		}},
		{"symlinked", "not a directory", func(dir string) error {
			return os.Symlink(shortTempDir(t), dir)
		}},
	} {
		dir := filepath.Join(base, strings.Fields(c.name)[0])
		if err := c.make(dir); err != nil {
			t.Fatal(err)
		}
		before, _ := os.Lstat(dir)
		if _, err := New(emptyConfig(filepath.Join(dir, "ztunnel.sock"))); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New in a %s dir: %v, want an error saying %q", c.name, err, c.want)
		}
		if after, _ := os.Lstat(dir); after.Mode() != before.Mode() {
			t.Errorf("%s dir changed: %v -> %v", c.name, before.Mode(), after.Mode())
		}
	}
}

// The socket is bounded: while MaxConnections connections are open (here
// silent ones that never say hello), another waits in the backlog; it is
// served once one of them closes.
func TestConnectionsAreBounded(t *testing.T) {
	h := start(t, func(c *Config) { c.Timeout = time.Minute })
	var silent []*fakeZtunnel
	for range MaxConnections {
		silent = append(silent, dialZtunnel(t, h.path))
	}
	z := connectZtunnel(t, h.path)
	time.Sleep(300 * time.Millisecond) // what is under test is that nothing happens
	if n := h.srv.Connections(); n != 0 {
		t.Fatalf("%d ztunnels registered past the bound", n)
	}
	silent[0].uc.Close()
	if got := kinds(z.snapshot()); !slices.Equal(got, []string{"snapshot_sent"}) {
		t.Fatalf("snapshot %v once a slot freed", got)
	}
}
