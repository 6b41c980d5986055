// Package sysdump holds what `sluice-agent sysdump` needs to write a
// support bundle safely: a tar.gz writer that caps each file and the whole
// archive and passes every byte through the redactor, the redactor itself,
// and a reader that takes only regular files from a directory (no symlink
// followed, no FIFO or device opened). What goes in the bundle, section by
// section, is the command's (daemon/cli/sysdump.go); this package decides
// only that nothing unbounded, unredacted or outside the named dirs does.
package sysdump

import (
	"archive/tar"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"path"
	"sort"
	"strings"
	"time"
)

// Limits bound the archive. File caps one entry's content; Total caps the
// tar stream (headers and padding included), so the .tar.gz is never
// larger than Total plus gzip's few bytes of framing.
type Limits struct {
	File  int64
	Total int64
}

// DefaultLimits fit a ticket attachment and a node's busiest journal.
var DefaultLimits = Limits{File: 4 << 20, Total: 64 << 20}

// reserve is kept back from Total for the manifest and README, written
// last, so a full archive still says what it left out.
const reserve = 256 << 10

// Entry is one line of the manifest: a file in the archive, or one the
// archive left out, and why.
type Entry struct {
	Name      string `json:"name"`
	Size      int64  `json:"size,omitempty"`
	Truncated bool   `json:"truncated,omitempty"`
	Redacted  int    `json:"redacted,omitempty"`
	// Omitted says why the file is not in the archive (a symlink, a FIFO,
	// a secret, the size cap).
	Omitted string `json:"omitted,omitempty"`
}

// Archive writes a tar.gz under one top directory. Nothing reaches the
// stream without passing Redact and the caps.
type Archive struct {
	tw      *tar.Writer
	gz      *gzip.Writer
	top     string
	lim     Limits
	now     time.Time
	used    int64
	entries []Entry
	notes   []string
	err     error
}

// NewArchive starts an archive whose files all lie under top/.
func NewArchive(w io.Writer, top string, lim Limits, now time.Time) *Archive {
	gz := gzip.NewWriter(w)
	return &Archive{tw: tar.NewWriter(gz), gz: gz, top: top, lim: lim, now: now}
}

// tarSize is what a file of n bytes costs in the tar stream.
func tarSize(n int64) int64 { return 512 + (n+511)/512*512 }

// Add writes one file, redacted, its content cut at the per-file cap (the
// head kept: for a log, the caller passes the tail it wants). A file that
// would pass the total cap is left out and listed.
func (a *Archive) Add(name string, data []byte) { a.AddCut(name, data, false) }

// AddCut is Add for content its reader already cut at a cap.
func (a *Archive) AddCut(name string, data []byte, cut bool) {
	name = cleanName(name)
	e := Entry{Name: name, Truncated: cut}
	if int64(len(data)) > a.lim.File {
		data, e.Truncated = data[:a.lim.File], true
	}
	data, e.Redacted = Redact(data)
	if a.used+tarSize(int64(len(data)))+reserve > a.lim.Total {
		e.Omitted = fmt.Sprintf("the archive's %d-byte cap", a.lim.Total)
		a.entries = append(a.entries, e)
		return
	}
	e.Size = int64(len(data))
	a.entries = append(a.entries, e)
	a.write(name, data)
}

// Omit lists a file that is not in the archive, and why.
func (a *Archive) Omit(name, why string) {
	a.entries = append(a.entries, Entry{Name: cleanName(name), Omitted: why})
}

// cleanName keeps a name taken from a hostile dir inside the archive's top
// directory and free of control characters and secrets: a file can be
// named "token=…" as easily as it can hold one.
func cleanName(name string) string {
	parts := strings.Split(name, "/")
	for i, p := range parts {
		p = strings.Map(func(r rune) rune {
			if r < 0x20 || r == 0x7f {
				return '_'
			}
			return r
		}, p)
		if p == "" || p == "." || p == ".." {
			p = "_"
		}
		red, _ := Redact([]byte(p))
		parts[i] = strings.ReplaceAll(string(red), "/", "_")
	}
	return strings.Join(parts, "/")
}

// Note records something the reader of the bundle should know: a section
// that failed, an agent that did not answer.
func (a *Archive) Note(format string, args ...any) {
	a.notes = append(a.notes, fmt.Sprintf(format, args...))
}

// Notes are what Note recorded, for the command to print.
func (a *Archive) Notes() []string { return a.notes }

func (a *Archive) write(name string, data []byte) {
	if a.err != nil {
		return
	}
	a.used += tarSize(int64(len(data)))
	hdr := &tar.Header{Name: path.Join(a.top, name), Mode: 0o600, Size: int64(len(data)), ModTime: a.now, Typeflag: tar.TypeReg, Format: tar.FormatPAX}
	if err := a.tw.WriteHeader(hdr); err != nil {
		a.err = fmt.Errorf("write %s: %w", name, err)
		return
	}
	if _, err := a.tw.Write(data); err != nil {
		a.err = fmt.Errorf("write %s: %w", name, err)
	}
}

// manifest is the archive's index: manifest.json.
type manifest struct {
	Created string   `json:"created"`
	Limits  Limits   `json:"limits"`
	Notes   []string `json:"notes"`
	Files   []Entry  `json:"files"`
}

// maxListed bounds the manifest of a dir with a million entries.
const maxListed = 2000

// Close writes manifest.json and README.txt and ends the stream.
func (a *Archive) Close(readme string) error {
	m := manifest{Created: a.now.UTC().Format(time.RFC3339), Limits: a.lim, Notes: a.notes, Files: a.entries}
	if m.Notes == nil {
		m.Notes = []string{}
	}
	sort.SliceStable(m.Files, func(i, j int) bool { return m.Files[i].Name < m.Files[j].Name })
	if len(m.Files) > maxListed {
		m.Notes = append(m.Notes, fmt.Sprintf("manifest: %d files listed, the rest left out", maxListed))
		m.Files = m.Files[:maxListed]
	}
	js, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	omitted := 0
	for _, e := range a.entries {
		if e.Omitted != "" {
			omitted++
		}
	}
	var b strings.Builder
	b.WriteString(readme)
	fmt.Fprintf(&b, "\n%d files, %d left out (manifest.json says which and why).\n", len(a.entries)-omitted, omitted)
	for _, n := range a.notes {
		fmt.Fprintf(&b, "note: %s\n", n)
	}
	// Within the reserve; cut rather than pass the cap.
	for _, f := range []struct {
		name string
		data []byte
	}{{"manifest.json", js}, {"README.txt", []byte(b.String())}} {
		data, _ := Redact(f.data)
		if len(data) > reserve/2-1024 {
			data = data[:reserve/2-1024]
		}
		a.write(f.name, data)
	}
	if a.err != nil {
		return a.err
	}
	if err := a.tw.Close(); err != nil {
		return err
	}
	return a.gz.Close()
}
