package workloads

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// files writes each name in dir with its content; a name ending in "/"
// is made a directory.
func files(t *testing.T, dir string, contents map[string]string) {
	t.Helper()
	for name, body := range contents {
		var err error
		if d, ok := strings.CutSuffix(name, "/"); ok {
			err = os.Mkdir(filepath.Join(dir, d), 0o700)
		} else {
			err = os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// unchanged fails unless dir holds exactly contents, byte for byte.
func unchanged(t *testing.T, dir string, contents map[string]string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name()+map[bool]string{true: "/"}[e.IsDir()])
	}
	var want []string
	for name := range contents {
		want = append(want, name)
	}
	slices.Sort(want)
	if !slices.Equal(names, want) {
		t.Fatalf("%s holds %q, want %q", dir, names, want)
	}
	for name, body := range contents {
		if strings.HasSuffix(name, "/") {
			continue
		}
		if b, _ := os.ReadFile(filepath.Join(dir, name)); string(b) != body {
			t.Errorf("%s: %q, want %q", name, b, body)
		}
	}
}

const goodRecord = `{"containerID":"c1","ifName":"eth0","netns":"/netns/c1"}`

// A state dir that names someone else's directory (a mistyped flag: /etc,
// a CNI conf dir) is refused before anything in it is read, moved or
// removed: its .json files are not renamed .corrupt, and the agent does
// not start on it.
func TestUnitForeignStateDirIsRefused(t *testing.T) {
	for _, foreign := range []map[string]string{
		{"passwd": "root:x:0:0", "10-bridge.json": `{"cniVersion":"1.0.0"}`},
		{"10-calico.conflist": "{}", "c1:eth0.json": goodRecord},
		{"sub/": ""},
		{"c1:eth0.json.bak": goodRecord},
		{".tmp-editor-swap": "", "c1:eth0.json": goodRecord},
	} {
		u := newUnit(t)
		dir := t.TempDir()
		files(t, dir, foreign)
		_, err := Open(Config{Dir: dir, Opener: u.ns, Kernel: u.kernel})
		if err == nil || !strings.Contains(err.Error(), "not sluice's") {
			t.Errorf("Open on a dir holding %q: err = %v, want a refusal", keys(foreign), err)
		}
		unchanged(t, dir, foreign)
		if err := ClaimDir(dir); err == nil {
			t.Errorf("ClaimDir on a dir holding %q succeeded", keys(foreign))
		}
		unchanged(t, dir, foreign)
	}
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// An agent upgraded from one that wrote no marker keeps its state dir: a
// dir holding only what the journal writes (records, records moved aside,
// temp files) is claimed, its records load, and the marker is written. An
// empty dir (the chart's hostPath, made by the kubelet) is claimed too.
func TestUnitJournalOnlyDirIsClaimed(t *testing.T) {
	u := newUnit(t)
	old := t.TempDir()
	// An earlier agent moved any .json it could not parse aside, a
	// record's name or not: "notes.json.corrupt" is its doing too.
	files(t, old, map[string]string{"c1:eth0.json": goodRecord, "c0:eth0.json.corrupt": "{", "notes.json.corrupt": "{", ".tmp-123": "half"})
	s, err := Open(Config{Dir: old, Opener: u.ns, Kernel: u.kernel})
	if err != nil {
		t.Fatalf("Open on an earlier agent's state dir: %v", err)
	}
	if got := s.List(); len(got) != 1 || got[0].ContainerID != "c1" {
		t.Errorf("records loaded: %+v", got)
	}
	if _, err := os.Stat(filepath.Join(old, stateMarker)); err != nil {
		t.Errorf("claimed dir has no marker: %v", err)
	}
	empty := t.TempDir()
	if err := ClaimDir(empty); err != nil {
		t.Fatalf("ClaimDir on an empty dir: %v", err)
	}
	if _, err := os.Stat(filepath.Join(empty, stateMarker)); err != nil {
		t.Errorf("claimed dir has no marker: %v", err)
	}
}

// In a dir the agent has claimed, a file someone else put there is left
// alone: a .json that is not a record's name is neither loaded nor moved
// aside, and the agent still starts (a stray file in its own dir must not
// keep a node's pods from starting).
func TestUnitStrayFilesInTheStateDirAreLeftAlone(t *testing.T) {
	u := newUnit(t)
	stray := map[string]string{"notes.json": "{not json", "README": "hands off", "backup/": ""}
	files(t, u.state, stray)
	s := u.open(t)
	if len(s.List()) != 0 {
		t.Errorf("loaded %+v", s.List())
	}
	stray[stateMarker] = markerText
	unchanged(t, u.state, stray)
}

// RemoveJournal removes records that parse, records moved aside and temp
// files, and leaves everything else, and the marker with it (the dir is
// still the journal's, and not empty).
func TestUnitRemoveJournalRemovesOnlyTheJournals(t *testing.T) {
	dir := t.TempDir()
	if err := ClaimDir(dir); err != nil {
		t.Fatal(err)
	}
	ours := map[string]string{"c1:eth0.json": goodRecord, "c0:eth0.json.corrupt": "{", ".tmp-9": "half"}
	theirs := map[string]string{"notes.json": "x", "README": "y", "c2:eth0.json": "{truncated", "sub/": ""}
	files(t, dir, ours)
	files(t, dir, theirs)
	left, err := RemoveJournal(dir)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"README", "c2:eth0.json", "notes.json", "sub"}; !slices.Equal(left, want) {
		t.Errorf("left %q, want %q", left, want)
	}
	theirs[stateMarker] = markerText
	unchanged(t, dir, theirs)

	// With nothing else left, the marker goes too, and the dir is empty.
	for name := range theirs {
		if name != stateMarker {
			os.Remove(filepath.Join(dir, strings.TrimSuffix(name, "/")))
		}
	}
	if left, err := RemoveJournal(dir); err != nil || len(left) != 0 {
		t.Fatalf("RemoveJournal = %q, %v", left, err)
	}
	unchanged(t, dir, map[string]string{})

	// A dir never claimed is not the journal's to empty.
	other := t.TempDir()
	files(t, other, map[string]string{"c1:eth0.json": goodRecord})
	if _, err := RemoveJournal(other); err == nil {
		t.Error("RemoveJournal emptied a dir without the marker")
	}
	unchanged(t, other, map[string]string{"c1:eth0.json": goodRecord})
}
