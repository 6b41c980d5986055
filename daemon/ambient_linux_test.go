package main

import (
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicemesh/sluice/test/harness/nstest"
)

// A step that fails after the ambient node was built (here the installer,
// whose plugin binary is missing) closes the node: its ZDS socket is
// unlinked and the next agent listens on it. Before, the socket stayed
// bound until the process exited.
func TestFailedBuildClosesTheAmbientNode(t *testing.T) {
	nstest.RequireRoot(t)
	dir, err := os.MkdirTemp("", "amb") // sun_path holds 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	roots := filepath.Join(dir, "netns")
	if err := os.Mkdir(roots, 0o755); err != nil {
		t.Fatal(err)
	}
	zds := filepath.Join(dir, "zt", "ztunnel.sock")
	args := []string{"--ambient", "--state-dir", filepath.Join(dir, "state"), "--socket", filepath.Join(dir, "run", "agent.sock"),
		"--ztunnel-socket", zds, "--netns-roots", roots, "--host-netns", nstest.New(t, "host").Path,
		"--cni-conf-dir", filepath.Join(dir, "net.d"), "--cni-bin-dir", filepath.Join(dir, "bin"),
		"--plugin-binary", filepath.Join(dir, "absent", "sluice")}
	cfg, err := parseConfig(args, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	if _, err := newAgent(cfg, log); err == nil || !strings.Contains(err.Error(), "plugin binary") {
		t.Fatalf("newAgent = %v, want the installer's error", err)
	}
	if _, err := os.Stat(zds); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the ZDS socket is there after a failed build: %v", err)
	}
	cfg, err = parseConfig(append(args, "--install=false"), func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	a, err := newAgent(cfg, log)
	if err != nil {
		t.Fatalf("the next agent: %v", err)
	}
	a.close()
}
