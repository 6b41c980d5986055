package conflist

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// testEntryConfig is what the daemon would pass as the plugin config.
var testEntryConfig = map[string]any{
	"socket":            "/var/run/sluice/agent.sock",
	"timeout":           "2s",
	"logLevel":          "info",
	"excludeNamespaces": []string{"kube-system", "istio-system"},
}

func mustEntry(t testing.TB, cfg map[string]any) []byte {
	t.Helper()
	e, err := Entry(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func testdata(t *testing.T, name string) []byte {
	t.Helper()
	return readTestFile(t, filepath.Join("testdata", "primary", name))
}

func readTestFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// otherPlugins returns the exact bytes of every non-sluice plugin, found by
// plain decoding rather than by the offsets the code under test computes.
func otherPlugins(t testing.TB, conflist []byte) [][]byte {
	t.Helper()
	var doc struct {
		Plugins []json.RawMessage `json:"plugins"`
	}
	if err := json.Unmarshal(conflist, &doc); err != nil {
		t.Fatalf("decode plugins: %v", err)
	}
	var out [][]byte
	for _, p := range doc.Plugins {
		var typ struct {
			Type string `json:"type"`
		}
		if err := json.Unmarshal(p, &typ); err != nil {
			t.Fatalf("decode plugin type: %v", err)
		}
		if typ.Type != PluginType {
			out = append(out, p)
		}
	}
	return out
}

func pluginsEqual(a, b [][]byte) bool {
	return slices.EqualFunc(a, b, func(x, y []byte) bool { return string(x) == string(y) })
}

// hasEntry reports whether conflist holds a sluice entry anywhere.
func hasEntry(t testing.TB, conflist []byte) bool {
	t.Helper()
	types, err := PluginTypes(conflist)
	if err != nil {
		t.Fatalf("read plugin types: %v", err)
	}
	return slices.Contains(types, PluginType)
}
