package productbuild

import (
	"debug/elf"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// A binary built here carries the product's settings (go records them in
// it), is stripped and says its version, under the name asked for.
func TestBuildStampsTheProductSettings(t *testing.T) {
	dir := t.TempDir()
	opt := Options{Version: "v9.8.7-test"}
	if err := Build(t.Context(), opt, dir, Target{"stamped", "./testdata/version"}); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "stamped")
	out, err := exec.Command(bin).Output()
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(out)); got != opt.Version {
		t.Errorf("the binary says version %q, want %q", got, opt.Version)
	}
	// -s -w: no symbol table and no DWARF (go does not record ldflags
	// beside -trimpath, so look at the binary).
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, s := range []string{".symtab", ".debug_info"} {
		if f.Section(s) != nil {
			t.Errorf("the binary has %s: not stripped", s)
		}
	}
	meta, err := exec.Command("go", "version", "-m", bin).Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"-tags=" + Tags, "CGO_ENABLED=0", "-trimpath=true"} {
		if !strings.Contains(string(meta), want) {
			t.Errorf("build settings lack %s:\n%s", want, meta)
		}
	}
}

// Two packages with one last path element cannot share a go command's
// output directory: refused, not one binary silently overwriting the other.
func TestBuildRefusesTwoPackagesOfOneName(t *testing.T) {
	err := Build(t.Context(), Options{}, t.TempDir(), Target{"a", "./testdata/version"}, Target{"b", "./x/version"})
	if err == nil || !strings.Contains(err.Error(), "two packages named version") {
		t.Fatalf("err = %v, want the refusal", err)
	}
}
