package ociimage

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Building the product image twice from source, binaries and all, gives
// the same archive byte for byte: no timestamp, path or order leaks in.
func TestBuildIsReproducible(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	dir := t.TempDir()
	var archives [2][]byte
	for i := range archives {
		plugin, err := GoBinary(ctx, PluginPackage, "repro")
		if err != nil {
			t.Fatal(err)
		}
		agent, err := GoBinary(ctx, AgentPackage, "repro")
		if err != nil {
			t.Fatal(err)
		}
		img, err := Sluice(plugin, agent, "repro")
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, "sluice.tar")
		if _, err := WriteOCI(path, SluiceRepo+":repro", img); err != nil {
			t.Fatal(err)
		}
		if archives[i], err = os.ReadFile(path); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(archives[0], archives[1]) {
		t.Fatal("two builds of the same source gave different archives")
	}
}

// The layer holds the two binaries and their parent directories, root
// owned, executable, at the epoch: what the Dockerfile's scratch stage
// holds.
func TestSluiceLayer(t *testing.T) {
	img, err := Sluice([]byte("plugin"), []byte("agent"), "v")
	if err != nil {
		t.Fatal(err)
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers = %d, %v; want exactly one", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	want := []string{"usr/ d", "usr/local/ d", "usr/local/bin/ d", "usr/local/bin/sluice f plugin", "usr/local/bin/sluice-agent f agent"}
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
		if h.Mode != 0o755 || h.Uid != 0 || h.Gid != 0 || !h.ModTime.Equal(epoch) {
			t.Errorf("%s: mode %o uid %d gid %d mtime %v; want 0755, root, the epoch", h.Name, h.Mode, h.Uid, h.Gid, h.ModTime)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			got = append(got, h.Name+" d")
		case tar.TypeReg:
			b, _ := io.ReadAll(tr)
			got = append(got, h.Name+" f "+string(b))
		default:
			t.Errorf("%s: unexpected type %c", h.Name, h.Typeflag)
		}
	}
	if len(got) != len(want) {
		t.Fatalf("layer = %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("layer entry %d = %q, want %q", i, got[i], want[i])
		}
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if ep := cf.Config.Entrypoint; len(ep) != 1 || ep[0] != "/usr/local/bin/sluice-agent" {
		t.Errorf("entrypoint = %q, want the agent", ep)
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
