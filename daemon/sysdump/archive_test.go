package sysdump

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// readArchive returns every file of a tar.gz by name.
func readArchive(t *testing.T, b []byte) map[string][]byte {
	t.Helper()
	gz, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	files := map[string][]byte{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name] = data
	}
}

// A file over the per-file cap is cut, one that would pass the archive's
// cap is left out, and the manifest says both; the .tar.gz stays under
// the cap even for incompressible content.
func TestArchiveCapsEachFileAndTheWhole(t *testing.T) {
	lim := Limits{File: 64 << 10, Total: reserve + 200<<10}
	var out bytes.Buffer
	a := NewArchive(&out, "top", lim, time.Unix(0, 0))
	noise := make([]byte, 1<<20) // incompressible: gzip adds to it
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range noise {
		noise[i] = byte(rng.Uint32())
	}
	a.Add("big", noise)
	for _, n := range []string{"a", "b", "c", "d"} {
		a.Add("more/"+n, noise[:60<<10])
	}
	if err := a.Close("readme\n"); err != nil {
		t.Fatal(err)
	}
	if int64(out.Len()) > lim.Total {
		t.Errorf("archive is %d bytes, cap %d", out.Len(), lim.Total)
	}
	files := readArchive(t, out.Bytes())
	if got := len(files["top/big"]); got != int(lim.File) {
		t.Errorf("big: %d bytes in the archive, want the cap %d", got, lim.File)
	}
	var m manifest
	if err := json.Unmarshal(files["top/manifest.json"], &m); err != nil {
		t.Fatal(err)
	}
	byName := map[string]Entry{}
	for _, e := range m.Files {
		byName[e.Name] = e
	}
	if !byName["big"].Truncated {
		t.Errorf("manifest does not say big was cut: %+v", byName["big"])
	}
	omitted := 0
	for _, n := range []string{"a", "b", "c", "d"} {
		e := byName["more/"+n]
		_, in := files["top/more/"+n]
		if (e.Omitted != "") == in {
			t.Errorf("more/%s: in the archive %v, manifest %+v", n, in, e)
		}
		if e.Omitted != "" {
			omitted++
		}
	}
	if omitted == 0 || omitted == 4 {
		t.Errorf("%d of 4 files left out; want the cap to fall among them", omitted)
	}
	if !strings.Contains(string(files["top/README.txt"]), "left out") {
		t.Errorf("README:\n%s", files["top/README.txt"])
	}
}

// Nothing reaches the stream unredacted, names included, and no name
// leaves the top directory.
func TestArchiveRedactsContentAndNames(t *testing.T) {
	var out bytes.Buffer
	a := NewArchive(&out, "top", DefaultLimits, time.Unix(0, 0))
	a.Add("env.txt", []byte("SLUICE_X_TOKEN=planted-secret-1\n"))
	a.Add("journal/token=planted-secret-2", []byte("x"))
	a.Add("../../etc/evil\x1b[2J", []byte("x"))
	a.Omit("journal/password=planted-secret-3", "a fifo")
	a.Note("the agent said Authorization: Bearer planted-secret-4")
	if err := a.Close("readme\n"); err != nil {
		t.Fatal(err)
	}
	raw := readArchive(t, out.Bytes())
	var all bytes.Buffer
	for name, data := range raw {
		if !strings.HasPrefix(name, "top/") || strings.Contains(name, "..") || strings.ContainsAny(name, "\x1b") {
			t.Errorf("archive entry %q", name)
		}
		all.WriteString(name + "\n")
		all.Write(data)
	}
	for _, s := range []string{"planted-secret-1", "planted-secret-2", "planted-secret-3", "planted-secret-4"} {
		if strings.Contains(all.String(), s) {
			t.Errorf("%s is in the archive:\n%s", s, all.String())
		}
	}
	if !strings.Contains(string(raw["top/env.txt"]), "SLUICE_X_TOKEN="+Redacted) {
		t.Errorf("env.txt: %q", raw["top/env.txt"])
	}
}
