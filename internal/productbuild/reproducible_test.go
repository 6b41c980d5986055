package productbuild

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Two builds of the same source and version are the same bytes: one in
// the checkout (a .git beside it, the caller's environment asking for VCS
// stamping, v3 amd64 code and cgo), one in a copy of the tree at another,
// deeper path with no .git (as Docker's build context is). Paths, VCS
// state, build IDs and the caller's go settings all stay out.
func TestTwoBuildsAreByteIdentical(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	root := moduleRoot(t)
	copyDir := filepath.Join(t.TempDir(), "a", "much", "longer", "path", "to", "sluice")
	copyTree(t, root, copyDir)

	opt := Options{Version: "v0.0.0-repro"}
	inCheckout, inCopy := t.TempDir(), t.TempDir()
	t.Setenv("GOFLAGS", "-buildvcs=true")
	t.Setenv("GOAMD64", "v3")
	t.Setenv("GOARM64", "v9.0")
	t.Setenv("CGO_ENABLED", "1")
	if err := Build(ctx, Options{Version: opt.Version, Dir: root}, inCheckout, Product()...); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"GOFLAGS", "GOAMD64", "GOARM64", "CGO_ENABLED"} {
		os.Unsetenv(k) // t.Setenv restores them after the test
	}
	if err := Build(ctx, Options{Version: opt.Version, Dir: copyDir}, inCopy, Product()...); err != nil {
		t.Fatal(err)
	}
	for _, target := range Product() {
		a, err := os.ReadFile(filepath.Join(inCheckout, target.Name))
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(inCopy, target.Name))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a, b) {
			t.Errorf("%s: the build in the checkout and the one in a copy differ (%d and %d bytes)", target.Name, len(a), len(b))
			for _, bin := range []string{filepath.Join(inCheckout, target.Name), filepath.Join(inCopy, target.Name)} {
				meta, _ := exec.Command("go", "version", "-m", bin).CombinedOutput()
				t.Logf("%s:\n%s", bin, meta)
			}
		}
		if bytes.Contains(a, []byte(root)) || bytes.Contains(b, []byte(copyDir)) {
			t.Errorf("%s: the binary holds the path it was built in", target.Name)
		}
	}
}

// moduleRoot is the checkout's root, the directory of the main go.mod.
func moduleRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatal(err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		t.Fatal("not in a module")
	}
	return filepath.Dir(gomod)
}

// copyTree copies the files git would commit from root (tracked, and
// untracked but not ignored: the tree as it stands) to dst, without .git.
func copyTree(t *testing.T, root, dst string) {
	t.Helper()
	cmd := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	for _, name := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		src := filepath.Join(root, name)
		fi, err := os.Lstat(src)
		if os.IsNotExist(err) {
			continue // deleted in the work tree, not yet in the index
		}
		if err != nil {
			t.Fatal(err)
		}
		if !fi.Mode().IsRegular() {
			continue
		}
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dst, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, fi.Mode().Perm()); err != nil {
			t.Fatal(err)
		}
	}
}
