package conflist

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/containernetworking/cni/libcni"
)

// addSeeds seeds f with every test config, converted to a conflist when it
// is a single-plugin conf and convert is set.
func addSeeds(f *testing.F, convert bool) {
	files, err := filepath.Glob(filepath.Join("testdata", "primary", "*"))
	if err != nil || len(files) == 0 {
		f.Fatalf("no seed configs: %v", err)
	}
	for _, path := range files {
		data, err := os.ReadFile(path)
		if err != nil {
			f.Fatal(err)
		}
		if convert && filepath.Ext(path) != ".conflist" {
			if data, err = FromConf(data); err != nil {
				f.Fatal(err)
			}
		}
		f.Add(data)
	}
}

func FuzzInsertEntry(f *testing.F) {
	addSeeds(f, true)
	a := mustEntry(f, map[string]any{"socket": "/a.sock"})
	b := mustEntry(f, map[string]any{"socket": "/b.sock", "logLevel": "debug"})
	f.Fuzz(func(t *testing.T, in []byte) {
		out, err := InsertEntry(in, a)
		if err != nil {
			return
		}
		if !json.Valid(out) {
			t.Fatalf("invalid JSON:\n%s", out)
		}
		list, err := libcni.ConfListFromBytes(out)
		if err != nil {
			t.Fatalf("libcni rejects result: %v\n%s", err, out)
		}
		if got := list.Plugins[len(list.Plugins)-1].Network.Type; got != PluginType {
			t.Fatalf("last plugin is %q", got)
		}
		if again, err := InsertEntry(out, a); err != nil || !bytes.Equal(again, out) {
			t.Fatalf("not idempotent (err %v):\n%s\n---\n%s", err, out, again)
		}
		others := otherPlugins(t, in)
		if !pluginsEqual(others, otherPlugins(t, out)) {
			t.Fatalf("other plugins changed:\n%s\n---\n%s", in, out)
		}
		// Switching entries back and forth lands on the same bytes.
		viaB, err := InsertEntry(out, b)
		if err != nil {
			t.Fatalf("insert second entry: %v", err)
		}
		if back, err := InsertEntry(viaB, a); err != nil || !bytes.Equal(back, out) {
			t.Fatalf("a→b→a differs (err %v):\n%s\n---\n%s", err, out, back)
		}

		removed, err := RemoveEntry(out)
		if errors.Is(err, ErrOnlyPlugin) && len(others) == 0 {
			return
		}
		if err != nil {
			t.Fatalf("RemoveEntry(InsertEntry(x)): %v", err)
		}
		if !pluginsEqual(others, otherPlugins(t, removed)) {
			t.Fatalf("remove(insert(x)) changed other plugins:\n%s\n---\n%s", in, removed)
		}
		if !hasEntry(t, in) && !bytes.Equal(removed, in) {
			t.Fatalf("remove(insert(x)) != x:\n%q\n---\n%q", in, removed)
		}
	})
}

func FuzzRemoveEntry(f *testing.F) {
	addSeeds(f, true)
	f.Fuzz(func(t *testing.T, in []byte) {
		out, err := RemoveEntry(in)
		if err != nil {
			return
		}
		if hasEntry(t, out) {
			t.Fatalf("sluice entry left:\n%s", out)
		}
		if hasEntry(t, in) {
			if _, err := libcni.ConfListFromBytes(out); err != nil {
				t.Fatalf("libcni rejects result: %v\n%s", err, out)
			}
		}
		if !pluginsEqual(otherPlugins(t, in), otherPlugins(t, out)) {
			t.Fatalf("other plugins changed:\n%s\n---\n%s", in, out)
		}
		if again, err := RemoveEntry(out); err != nil || !bytes.Equal(again, out) {
			t.Fatalf("second RemoveEntry changed the file (err %v)", err)
		}
	})
}

func FuzzFromConf(f *testing.F) {
	addSeeds(f, false)
	f.Fuzz(func(t *testing.T, in []byte) {
		out, err := FromConf(in)
		if err != nil {
			return
		}
		list, err := libcni.ConfListFromBytes(out)
		if err != nil {
			t.Fatalf("libcni rejects result: %v\n%s", err, out)
		}
		conf, err := libcni.NetworkPluginConfFromBytes(in)
		if err != nil {
			t.Fatalf("converted a conf libcni rejects: %v", err)
		}
		if list.Name != conf.Network.Name || list.CNIVersion != conf.Network.CNIVersion || len(list.Plugins) != 1 {
			t.Fatalf("network changed: %+v from %+v", list, conf.Network)
		}
		var want, got bytes.Buffer
		if err := json.Compact(&want, in); err != nil {
			t.Fatal(err)
		}
		if err := json.Compact(&got, otherPlugins(t, out)[0]); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(want.Bytes(), got.Bytes()) {
			t.Fatalf("plugin changed beyond whitespace:\n%s\n---\n%s", want.Bytes(), got.Bytes())
		}
	})
}
