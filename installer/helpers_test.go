package installer

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sluicemesh/sluice/installer/conflist"
	"github.com/sluicemesh/sluice/test/harness/syncbuf"
)

// repairBudget is how fast the installer must notice and repair a change.
const repairBudget = time.Second

// testEntryConfig is what the daemon would pass as PluginConfig.
var testEntryConfig = map[string]any{
	"socket":            "/var/run/sluice/agent.sock",
	"timeout":           "2s",
	"logLevel":          "info",
	"excludeNamespaces": []string{"kube-system", "istio-system"},
}

// env is a fake node: a bin dir, a conf dir and a plugin binary to install.
type env struct {
	bin, conf, src string
	logs           *syncBuffer
}

func newEnv(t *testing.T) env {
	t.Helper()
	root := t.TempDir()
	e := env{
		bin:  filepath.Join(root, "opt", "cni", "bin"),
		conf: filepath.Join(root, "etc", "cni", "net.d"),
		src:  filepath.Join(root, "image", "sluice"),
		logs: &syncBuffer{},
	}
	for _, d := range []string{e.bin, e.conf, filepath.Dir(e.src)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeTestFile(t, e.src, []byte("#!/bin/sh\necho sluice plugin v1\n"), 0o755)
	return e
}

func (e env) config(chained bool) Config {
	return Config{
		BinDirs:        []string{e.bin},
		ConfDir:        e.conf,
		Chained:        chained,
		PluginBinary:   e.src,
		PluginConfig:   testEntryConfig,
		ResyncInterval: time.Hour, // repairs in tests must come from fsnotify
		Logger:         slog.New(slog.NewTextHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
}

func (e env) newInstaller(t *testing.T, cfg Config) *Installer {
	t.Helper()
	in, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return in
}

// start runs in until the test ends and fails the test if Run errs.
func start(t *testing.T, in *Installer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- in.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}

// waitFor polls cond until it holds or the repair budget is spent.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	waitForWithin(t, repairBudget, what, cond)
}

func waitForWithin(t *testing.T, budget time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(budget)
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", budget, what)
		}
		<-tick.C
	}
}

func readTestFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func writeTestFile(t *testing.T, path string, data []byte, perm os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, data, perm); err != nil {
		t.Fatal(err)
	}
}

// fileIs reports whether path holds exactly want.
func fileIs(path string, want []byte) bool {
	got, err := os.ReadFile(path)
	return err == nil && bytes.Equal(got, want)
}

func testdata(t *testing.T, name string) []byte {
	t.Helper()
	return readTestFile(t, filepath.Join("conflist", "testdata", "primary", name))
}

func mustEntry(t testing.TB, cfg map[string]any) []byte {
	t.Helper()
	e, err := conflist.Entry(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func mustInsert(t *testing.T, list []byte) []byte {
	t.Helper()
	out, err := conflist.InsertEntry(list, mustEntry(t, testEntryConfig))
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// syncBuffer is a log sink safe for the installer goroutine and the test.
type syncBuffer = syncbuf.Buffer

// chainedFrom reports whether the conflist primary holds list untouched
// and our conflist for it holds list with our entry last.
func chainedFrom(t *testing.T, primary string, list []byte) bool {
	t.Helper()
	return fileIs(primary, list) && fileIs(ownedConfFor(primary), mustInsert(t, list))
}
