package ociimage

import (
	"os"
	"path"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/sluicemesh/sluice/internal/productbuild"
	"github.com/sluicemesh/sluice/internal/sbom"
)

// The Dockerfile's product stage ships the files `make image` does, from
// what its build stage's hack/build run writes: the binaries in -o, their
// SBOMs in -sbom. An image of one builder with a file the other lacks
// fails here, not in a reviewer's diff of two filesystems.
func TestDockerfileShipsTheImageFiles(t *testing.T) {
	raw, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.ReplaceAll(string(raw), "\\\n", " "), "\n")
	last := 0
	for i, l := range lines {
		if strings.HasPrefix(l, "FROM ") {
			last = i
		}
	}
	// What the build stage's hack/build writes, by path.
	built := map[string]bool{}
	build := regexp.MustCompile(`go run \./hack/build .*-o (\S+) -sbom (\S+)`)
	for _, l := range lines[:last] {
		if m := build.FindStringSubmatch(l); m != nil {
			for _, t := range productbuild.Product() {
				built[path.Join(m[1], t.Name)] = true
				built[path.Join(m[2], sbom.FileName(t.Name))] = true
			}
		}
	}
	if len(built) == 0 {
		t.Fatal("no `go run ./hack/build ... -o DIR -sbom DIR` in the Dockerfile's build stage")
	}
	var shipped []string
	var entrypoint string
	for _, l := range lines[last:] {
		f := strings.Fields(l)
		switch {
		case len(f) > 0 && f[0] == "COPY":
			var args []string
			for _, a := range f[1:] {
				if !strings.HasPrefix(a, "--") {
					args = append(args, a)
				} else if a != "--from=build" && !strings.HasPrefix(a, "--chmod=") {
					t.Errorf("COPY flag %s: the test does not know what it ships", a)
				}
			}
			if len(args) < 2 || !strings.HasSuffix(args[len(args)-1], "/") {
				t.Fatalf("COPY %q: want files into a directory", args)
			}
			for _, src := range args[:len(args)-1] {
				if !built[src] {
					t.Errorf("COPY %s: the build stage does not write it", src)
				}
				shipped = append(shipped, strings.TrimPrefix(path.Join(args[len(args)-1], path.Base(src)), "/"))
			}
		case len(f) > 0 && f[0] == "ENTRYPOINT":
			entrypoint = strings.TrimSpace(strings.TrimPrefix(l, "ENTRYPOINT"))
		}
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	img, err := Sluice(bin, bin, "v")
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, e := range layerListing(t, img) {
		if name, _, _ := strings.Cut(e, " "); !strings.HasSuffix(name, "/") {
			files = append(files, name)
		}
	}
	slices.Sort(shipped)
	if !slices.Equal(shipped, files) {
		t.Errorf("the Dockerfile ships %q, make image %q", shipped, files)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if want := `["` + strings.Join(cf.Config.Entrypoint, `", "`) + `"]`; entrypoint != want {
		t.Errorf("the Dockerfile's entrypoint %s, make image's %s", entrypoint, want)
	}
}
