package ztunnel

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

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
