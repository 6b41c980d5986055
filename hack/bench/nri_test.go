package main

import (
	"os"
	"path/filepath"
	"testing"
)

// TestContainerdBuilt: the smoke run's check finds build.sh's cache by the
// version the script defaults to, and says not built when a binary lacks.
func TestContainerdBuilt(t *testing.T) {
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	cache := t.TempDir()
	t.Setenv("SLUICE_CACHE", cache)
	t.Setenv("CONTAINERD_VERSION", "")
	if containerdBuilt(root) {
		t.Fatal("built in an empty cache")
	}
	dir := filepath.Join(cache, "containerd", "v2.4.2")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, bin := range []string{"containerd", "containerd-shim-runc-v2", "ctr"} {
		if err := os.WriteFile(filepath.Join(dir, bin), nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if containerdBuilt(root) {
		t.Fatal("built without crictl")
	}
	if err := os.WriteFile(filepath.Join(dir, "crictl"), nil, 0o755); err != nil {
		t.Fatal(err)
	}
	if !containerdBuilt(root) {
		t.Fatal("not built with every binary in the default version's dir")
	}
	t.Setenv("CONTAINERD_VERSION", "v9.9.9")
	if containerdBuilt(root) {
		t.Fatal("$CONTAINERD_VERSION ignored")
	}
}
