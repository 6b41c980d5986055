package ociimage

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/sluicemesh/sluice/internal/sbom"
)

// An index over one image per platform, written twice into two
// directories, is the same archive byte for byte: no timestamp, path or
// order leaks in. index.json names the ref and points at the image index,
// which lists each image under the platform its config declares, and
// every blob is in the archive. (hack/image's TestDistIsReproducible
// does the same from source, binaries and all.)
func TestIndexIsReproducible(t *testing.T) {
	var archives [2][]byte
	var digests [2]string
	for i := range archives {
		var imgs []v1.Image
		for _, arch := range []string{"amd64", "arm64"} {
			img, err := Build([]File{{Path: "/bin/" + arch, Content: []byte(arch)}}, Config{Arch: arch})
			if err != nil {
				t.Fatal(err)
			}
			imgs = append(imgs, img)
		}
		idx, err := Index(imgs...)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(t.TempDir(), "sluice.tar")
		d, err := WriteOCIIndex(path, SluiceRepo+":repro", idx)
		if err != nil {
			t.Fatal(err)
		}
		digests[i] = d.String()
		if archives[i], err = os.ReadFile(path); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(archives[0], archives[1]) || digests[0] != digests[1] {
		t.Fatalf("two writes of the same images gave different archives (%s, %s)", digests[0], digests[1])
	}
	files := archiveFiles(t, archives[0])
	var index v1.IndexManifest
	if err := json.Unmarshal(files["index.json"], &index); err != nil || len(index.Manifests) != 1 {
		t.Fatalf("index.json: %v: %s", err, files["index.json"])
	}
	top := index.Manifests[0]
	if top.MediaType != types.OCIImageIndex || top.Digest.String() != digests[0] || top.Annotations["io.containerd.image.name"] != SluiceRepo+":repro" {
		t.Errorf("index.json points at %s %s %v; want the image index %s named %s:repro", top.MediaType, top.Digest, top.Annotations, digests[0], SluiceRepo)
	}
	var inner v1.IndexManifest
	if err := json.Unmarshal(files["blobs/sha256/"+top.Digest.Hex], &inner); err != nil {
		t.Fatalf("the image index blob: %v", err)
	}
	var platforms []string
	for _, m := range inner.Manifests {
		if m.Platform == nil {
			t.Fatalf("manifest %s has no platform", m.Digest)
		}
		var mf v1.Manifest
		if err := json.Unmarshal(files["blobs/sha256/"+m.Digest.Hex], &mf); err != nil {
			t.Fatalf("manifest %s: %v", m.Digest, err)
		}
		var cf v1.ConfigFile
		if err := json.Unmarshal(files["blobs/sha256/"+mf.Config.Digest.Hex], &cf); err != nil {
			t.Fatalf("config of %s: %v", m.Digest, err)
		}
		if cf.OS != m.Platform.OS || cf.Architecture != m.Platform.Architecture {
			t.Errorf("the index says %s, the image's config %s/%s", m.Platform, cf.OS, cf.Architecture)
		}
		for _, l := range mf.Layers {
			if _, ok := files["blobs/sha256/"+l.Digest.Hex]; !ok {
				t.Errorf("layer %s of %s is not in the archive", l.Digest, m.Platform)
			}
		}
		platforms = append(platforms, m.Platform.String())
	}
	if strings.Join(platforms, " ") != "linux/amd64 linux/arm64" {
		t.Errorf("platforms %q, want linux/amd64 and linux/arm64", platforms)
	}
	one, err := Build(nil, Config{Arch: "arm64"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Index(one, one); err == nil {
		t.Error("an index with two images for linux/arm64")
	}
}

// The layer holds the two binaries, their SBOMs and their parent
// directories, root owned, at the epoch, binaries executable: what the
// Dockerfile's scratch stage holds. Each SBOM is its binary's.
func TestSluiceLayer(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin, err := os.ReadFile(self) // a Go binary, with build info
	if err != nil {
		t.Fatal(err)
	}
	plugin, agent := append([]byte{}, bin...), append(bin, 0) // two distinct files
	img, err := Sluice(plugin, agent, "v")
	if err != nil {
		t.Fatal(err)
	}
	got := layerListing(t, img)
	want := []string{
		"sbom/ d 755", "sbom/sluice-agent.cdx.json f 644", "sbom/sluice.cdx.json f 644",
		"usr/ d 755", "usr/local/ d 755", "usr/local/bin/ d 755",
		"usr/local/bin/sluice f 755", "usr/local/bin/sluice-agent f 755",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("layer =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for path, content := range map[string][]byte{"/usr/local/bin/sluice": plugin, "/usr/local/bin/sluice-agent": agent} {
		if b, err := FileOf(img, path); err != nil || !bytes.Equal(b, content) {
			t.Errorf("%s is not the binary given (%v)", path, err)
		}
	}
	for _, name := range []string{"sluice", "sluice-agent"} {
		b, err := FileOf(img, SBOMDir+"/"+sbom.FileName(name))
		if err != nil {
			t.Fatal(err)
		}
		want, err := sbom.Generate(name, "v", bytes.NewReader(bin))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(b, want) {
			t.Errorf("%s's SBOM in the image is not its binary's", name)
		}
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if ep := cf.Config.Entrypoint; len(ep) != 1 || ep[0] != "/usr/local/bin/sluice-agent" {
		t.Errorf("entrypoint = %q, want the agent", ep)
	}
	if cf.Architecture != runtime.GOARCH {
		t.Errorf("architecture %s, want %s, the binaries'", cf.Architecture, runtime.GOARCH)
	}
}

// layerListing is the image's one layer as "<name> <d|f> <mode>", checking
// that every entry is root's and at the epoch.
func layerListing(t *testing.T, img v1.Image) []string {
	t.Helper()
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers = %d, %v; want exactly one", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	var got []string
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Uid != 0 || h.Gid != 0 || !h.ModTime.Equal(epoch) {
			t.Errorf("%s: uid %d gid %d mtime %v; want root and the epoch", h.Name, h.Uid, h.Gid, h.ModTime)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			got = append(got, fmt.Sprintf("%s d %o", h.Name, h.Mode))
		case tar.TypeReg:
			got = append(got, fmt.Sprintf("%s f %o", h.Name, h.Mode))
		default:
			t.Errorf("%s: unexpected type %c", h.Name, h.Typeflag)
		}
	}
	return got
}

// archiveFiles are an OCI archive's entries by name.
func archiveFiles(t *testing.T, archive []byte) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	tr := tar.NewReader(bytes.NewReader(archive))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name], _ = io.ReadAll(tr)
	}
}

// The pause image goes through the same writer as the product's: an OCI
// archive naming its ref for containerd, the same bytes from the same
// source, /pause its one file and entrypoint.
func TestPauseArchive(t *testing.T) {
	dir := t.TempDir()
	var archives [2][]byte
	for i := range archives {
		path := filepath.Join(dir, "pause.tar")
		if err := PackPause(t.Context(), path, PauseRef); err != nil {
			t.Fatal(err)
		}
		var err error
		if archives[i], err = os.ReadFile(path); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(archives[0], archives[1]) {
		t.Fatal("two packs of the pause image gave different archives")
	}
	files := map[string][]byte{}
	tr := tar.NewReader(bytes.NewReader(archives[0]))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name], _ = io.ReadAll(tr)
	}
	if _, ok := files["oci-layout"]; !ok {
		t.Errorf("no oci-layout in the archive: not an OCI archive")
	}
	if !bytes.Contains(files["index.json"], []byte(`"io.containerd.image.name":"`+PauseRef+`"`)) {
		t.Errorf("index.json does not name %s for containerd: %s", PauseRef, files["index.json"])
	}
	img, err := Pause([]byte("bin"))
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if ep := cf.Config.Entrypoint; len(ep) != 1 || ep[0] != "/pause" {
		t.Errorf("entrypoint = %q, want /pause", ep)
	}
}
