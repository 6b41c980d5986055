package sbom

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicemesh/sluice/internal/productbuild"
)

// The SBOM of each product binary lists what `go version -m` says is in
// it: the same modules at the same versions and go.sum hashes, the
// toolchain, and the main module; and a second generation is the same
// bytes.
func TestSBOMListsWhatGoVersionSays(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	dir := t.TempDir()
	if err := productbuild.Build(ctx, productbuild.Options{Version: "v1.2.3-sbom"}, dir, productbuild.Product()...); err != nil {
		t.Fatal(err)
	}
	for _, target := range productbuild.Product() {
		t.Run(target.Name, func(t *testing.T) {
			bin := filepath.Join(dir, target.Name)
			first, second := generate(t, target.Name, bin), generate(t, target.Name, bin)
			if !bytes.Equal(first, second) {
				t.Fatalf("two generations differ:\n%s\n---\n%s", first, second)
			}
			want := goVersionM(t, bin)
			got := parse(t, first)
			if got.main != want.main || got.name != target.Name || got.version != "v1.2.3-sbom" {
				t.Errorf("the SBOM describes %s (%s) at %s from %s; want %s at v1.2.3-sbom from %s",
					got.name, got.purl, got.version, got.main, target.Name, want.main)
			}
			if got.toolchain != want.toolchain {
				t.Errorf("toolchain %q, go version -m says %q", got.toolchain, want.toolchain)
			}
			if !slices.Equal(got.modules, want.modules) {
				t.Errorf("modules differ from go version -m:\n got %q\nwant %q", got.modules, want.modules)
			}
			if len(want.modules) < 3 {
				t.Errorf("go version -m lists %d modules: not the product binary?", len(want.modules))
			}
			if !slices.Equal(got.dependsOn, got.refs) {
				t.Errorf("the binary depends on %q, want every component %q", got.dependsOn, got.refs)
			}
		})
	}
}

// A binary with no build info (not a Go binary) has no SBOM, rather than
// an empty one.
func TestSBOMRefusesANonGoBinary(t *testing.T) {
	if _, err := Generate("x", "v", bytes.NewReader([]byte("#!/bin/sh\n"))); err == nil {
		t.Fatal("an SBOM of a shell script")
	}
}

// h1 is go.sum's base64 SHA-256; the SBOM carries it as hex (the
// expected value decoded by another tool).
func TestH1Hex(t *testing.T) {
	got, err := h1Hex("h1:gnHlU/YC1bJcS+CSh+pYQKeuu4O4gsMGW1NMaLhkzW4=")
	if err != nil || got != "8271e553f602d5b25c4be09287ea5840a7aebb83b882c3065b534c68b864cd6e" {
		t.Errorf("h1Hex = %q, %v", got, err)
	}
	for _, bad := range []string{"", "h2:abc", "h1:!!", "h1:YWJj"} {
		if _, err := h1Hex(bad); err == nil {
			t.Errorf("h1Hex(%q) accepted", bad)
		}
	}
}

func generate(t *testing.T, name, bin string) []byte {
	t.Helper()
	f, err := os.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out, err := Generate(name, "v1.2.3-sbom", f)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// listing is a binary's contents as either side tells them: modules are
// "path version sum", in order.
type listing struct {
	name, version, purl, main, toolchain string
	modules, refs, dependsOn             []string
}

// goVersionM reads `go version -m`'s report, the go command's own reading
// of the build info, replacements applied.
func goVersionM(t *testing.T, bin string) listing {
	t.Helper()
	out, err := exec.Command("go", "version", "-m", bin).Output()
	if err != nil {
		t.Fatalf("go version -m: %v", err)
	}
	var l listing
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		if l.toolchain == "" {
			_, l.toolchain, _ = strings.Cut(line, ": ")
			continue
		}
		f := strings.Split(strings.TrimPrefix(line, "\t"), "\t")
		for len(f) < 4 {
			f = append(f, "")
		}
		switch f[0] {
		case "mod":
			l.main = f[1]
		case "dep":
			l.modules = append(l.modules, f[1]+" "+f[2]+" "+f[3])
		case "=>": // the replacement is what was built
			l.modules[len(l.modules)-1] = f[1] + " " + f[2] + " " + f[3]
		}
	}
	return l
}

func parse(t *testing.T, sbom []byte) listing {
	t.Helper()
	type property struct{ Name, Value string }
	type component struct {
		Ref        string `json:"bom-ref"`
		Name       string
		Version    string
		Purl       string
		Hashes     []struct{ Alg, Content string }
		Properties []property
	}
	var doc struct {
		BOMFormat    string
		SpecVersion  string
		SerialNumber string
		Metadata     struct {
			Timestamp string
			Component component
		}
		Components   []component
		Dependencies []struct {
			Ref       string
			DependsOn []string
		}
	}
	if err := json.Unmarshal(sbom, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.BOMFormat != "CycloneDX" || doc.SpecVersion != "1.6" {
		t.Errorf("bomFormat %q specVersion %q, want CycloneDX 1.6", doc.BOMFormat, doc.SpecVersion)
	}
	if doc.SerialNumber != "" || doc.Metadata.Timestamp != "" {
		t.Errorf("serial number %q, timestamp %q: an SBOM that differs per run", doc.SerialNumber, doc.Metadata.Timestamp)
	}
	m := doc.Metadata.Component
	l := listing{name: m.Name, version: m.Version, purl: m.Purl}
	l.main, _, _ = strings.Cut(strings.TrimPrefix(m.Purl, "pkg:golang/"), "@")
	for _, c := range doc.Components {
		l.refs = append(l.refs, c.Ref)
		if c.Name == "std" {
			l.toolchain = c.Version
			continue
		}
		var h1 string
		for _, p := range c.Properties {
			if p.Name == "cdx:gomod:hash:h1" {
				h1 = p.Value
			}
		}
		if h1 != "" {
			want, err := h1Hex(h1)
			if err != nil || len(c.Hashes) != 1 || c.Hashes[0].Alg != "SHA-256" || c.Hashes[0].Content != want {
				t.Errorf("%s: hashes %v do not hold its h1 %s", c.Name, c.Hashes, h1)
			}
		}
		l.modules = append(l.modules, c.Name+" "+c.Version+" "+h1)
	}
	for _, d := range doc.Dependencies {
		if d.Ref == m.Ref {
			l.dependsOn = d.DependsOn
		}
	}
	return l
}
