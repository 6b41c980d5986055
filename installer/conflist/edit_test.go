package conflist

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/golden")

// TestGoldenPrimaries runs the edit over configs as the common CNIs ship
// them: testdata/primary/X is the input, testdata/golden/X.inserted the
// file with our entry, X.removed that file with the entry taken out again.
func TestGoldenPrimaries(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "primary", "*"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no test configs: %v", err)
	}
	entry := mustEntry(t, testEntryConfig)
	for _, f := range files {
		name := filepath.Base(f)
		t.Run(name, func(t *testing.T) {
			in := readTestFile(t, f)
			list := in
			if filepath.Ext(name) != ".conflist" {
				if list, err = FromConf(in); err != nil {
					t.Fatalf("FromConf: %v", err)
				}
			}
			hadEntry := hasEntry(t, list)

			got, err := InsertEntry(list, entry)
			if err != nil {
				t.Fatalf("InsertEntry: %v", err)
			}
			golden(t, name+".inserted", got)
			if again, err := InsertEntry(got, entry); err != nil || !bytes.Equal(again, got) {
				t.Errorf("second InsertEntry changed the file (err %v):\n%s", err, again)
			}
			if list, err := libcni.ConfListFromBytes(got); err != nil || list.Plugins[len(list.Plugins)-1].Network.Type != PluginType {
				t.Errorf("result is not a conflist ending in sluice: %v", err)
			}
			if !pluginsEqual(otherPlugins(t, list), otherPlugins(t, got)) {
				t.Errorf("other plugins' bytes changed")
			}

			removed, err := RemoveEntry(got)
			if errors.Is(err, ErrOnlyPlugin) && len(otherPlugins(t, list)) == 0 {
				return
			}
			if err != nil {
				t.Fatalf("RemoveEntry: %v", err)
			}
			golden(t, name+".removed", removed)
			if !hadEntry && !bytes.Equal(removed, list) {
				t.Errorf("remove(insert(x)) != x:\n%s", removed)
			}
		})
	}
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", "golden", name)
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read golden (run with -update to create): %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from golden (run with -update to accept)\n--- got\n%s\n--- want\n%s", name, got, want)
	}
}

func TestInsertEntryRejects(t *testing.T) {
	entry := mustEntry(t, nil)
	for name, tc := range map[string]struct {
		list, entry string
		want        string
	}{
		"not json":          {`{"name":"x","plugins":[`, string(entry), "not valid JSON"},
		"not an object":     {`[{"type":"bridge"}]`, string(entry), "not a JSON object"},
		"no plugins":        {`{"name":"x","type":"bridge"}`, string(entry), `no "plugins" array`},
		"plugins not array": {`{"name":"x","plugins":{"type":"bridge"}}`, string(entry), "not an array"},
		"plugins twice":     {`{"name":"x","plugins":[{"type":"a"}],"plugins":[{"type":"b"}]}`, string(entry), "more than one"},
		"plugin not object": {`{"name":"x","plugins":["bridge"]}`, string(entry), "plugin 0 is not a JSON object"},
		"type not string":   {`{"name":"x","plugins":[{"type":7}]}`, string(entry), "type of plugin 0"},
		"no name":           {`{"plugins":[{"type":"bridge"}]}`, string(entry), "no name"},
		"plugin no type":    {`{"name":"x","plugins":[{"bridge":"br0"}]}`, string(entry), "missing 'type'"},
		"entry not ours":    {`{"name":"x","plugins":[{"type":"bridge"}]}`, `{"type":"bridge"}`, "want \"sluice\""},
		"entry not object":  {`{"name":"x","plugins":[{"type":"bridge"}]}`, `"sluice"`, "parse sluice entry"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := InsertEntry([]byte(tc.list), []byte(tc.entry))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("InsertEntry error = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestInsertEntryLayout(t *testing.T) {
	entry := mustEntry(t, map[string]any{"socket": "/s"})
	for name, tc := range map[string]struct{ in, want string }{
		"compact":     {`{"name":"n","plugins":[{"type":"a"},{"type":"b"}]}`, `{"name":"n","plugins":[{"type":"a"},{"type":"b"},{"type":"sluice","socket":"/s"}]}`},
		"spaced":      {`{"name":"n","plugins":[{"type":"a"}, {"type":"b"}]}`, `{"name":"n","plugins":[{"type":"a"}, {"type":"b"}, {"type":"sluice","socket":"/s"}]}`},
		"empty list":  {`{"name":"n","plugins":[]}`, `{"name":"n","plugins":[{"type":"sluice","socket":"/s"}]}`},
		"only sluice": {`{"name":"n","plugins":[{"type":"sluice"}]}`, `{"name":"n","plugins":[{"type":"sluice","socket":"/s"}]}`},
		"first moves": {`{"name":"n","plugins":[{"type":"sluice"}, {"type":"a"}]}`, `{"name":"n","plugins":[{"type":"a"},{"type":"sluice","socket":"/s"}]}`},
		"tabs": {"{\n\t\"name\": \"n\",\n\t\"plugins\": [\n\t\t{\"type\": \"a\"}\n\t]\n}\n",
			"{\n\t\"name\": \"n\",\n\t\"plugins\": [\n\t\t{\"type\": \"a\"},\n\t\t{\n\t\t\t\"type\": \"sluice\",\n\t\t\t\"socket\": \"/s\"\n\t\t}\n\t]\n}\n"},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := InsertEntry([]byte(tc.in), entry)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Errorf("got\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
}

func TestRemoveEntry(t *testing.T) {
	t.Run("no entry is returned unchanged", func(t *testing.T) {
		in := testdata(t, "10-flannel.conflist")
		out, err := RemoveEntry(in)
		if err != nil || !bytes.Equal(out, in) {
			t.Fatalf("RemoveEntry = %q, %v", out, err)
		}
	})
	t.Run("only plugin", func(t *testing.T) {
		if _, err := RemoveEntry(testdata(t, "40-sluice-only.conflist")); !errors.Is(err, ErrOnlyPlugin) {
			t.Fatalf("err = %v, want ErrOnlyPlugin", err)
		}
	})
	t.Run("all copies", func(t *testing.T) {
		out, err := RemoveEntry(testdata(t, "22-bridge-sluice-twice.conflist"))
		if err != nil {
			t.Fatal(err)
		}
		if hasEntry(t, out) {
			t.Fatalf("sluice entry left in %s", out)
		}
	})
}

// TestRemovePlugins removes another plugin type (a leftover istio-cni
// entry) as RemoveEntry removes ours: its element and the separator before
// it, nothing else.
func TestRemovePlugins(t *testing.T) {
	flannel := testdata(t, "10-flannel.conflist")
	i := bytes.LastIndex(flannel, []byte("\n  ]"))
	withIstio := append(append(append([]byte{}, flannel[:i]...), ",\n    {\"type\": \"istio-cni\", \"log_level\": \"info\"}"...), flannel[i:]...)
	out, err := RemovePlugins(withIstio, "istio-cni")
	if err != nil || !bytes.Equal(out, flannel) {
		t.Fatalf("RemovePlugins = %v\n%s\nwant the file without the entry, byte for byte", err, out)
	}
	if out, err := RemovePlugins(flannel, "istio-cni"); err != nil || !bytes.Equal(out, flannel) {
		t.Fatalf("a list without the type changed: %v", err)
	}
	only := []byte(`{"cniVersion": "1.0.0", "name": "n", "plugins": [{"type": "istio-cni"}]}`)
	if _, err := RemovePlugins(only, "istio-cni"); err == nil {
		t.Fatal("removed the only plugin of a list")
	}
}

func TestFromConf(t *testing.T) {
	out, err := FromConf(testdata(t, "10-bridge.conf"))
	if err != nil {
		t.Fatal(err)
	}
	list, err := libcni.ConfListFromBytes(out)
	if err != nil {
		t.Fatal(err)
	}
	if list.Name != "mynet" || list.CNIVersion != "0.4.0" || len(list.Plugins) != 1 || list.Plugins[0].Network.Type != "bridge" {
		t.Errorf("converted list = %+v", list)
	}
	if _, err := FromConf([]byte(`{"type":"bridge"}`)); err == nil || !strings.Contains(err.Error(), "no network name") {
		t.Errorf("conf without name: err = %v", err)
	}
	if _, err := FromConf([]byte(`{"name":"n"}`)); err == nil {
		t.Errorf("conf without type converted")
	}
}

func TestEntry(t *testing.T) {
	got := mustEntry(t, map[string]any{"timeout": "2s", "socket": "/s", "excludeNamespaces": []string{"a<b"}})
	if want := `{"type":"sluice","excludeNamespaces":["a<b"],"socket":"/s","timeout":"2s"}`; string(got) != want {
		t.Errorf("Entry = %s, want %s", got, want)
	}
	if got := mustEntry(t, nil); string(got) != `{"type":"sluice"}` {
		t.Errorf("empty Entry = %s", got)
	}
	if _, err := Entry(map[string]any{"type": "bridge"}); err == nil {
		t.Error("Entry accepted another type")
	}
}
