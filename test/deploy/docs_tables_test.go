package deploy

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

var codeSpan = regexp.MustCompile("`([^`]+)`")

// TestDocsValuesTableMatchesSchema: docs/install.md's values table and
// values.schema.json name the same values: every documented key is in the
// schema, every leaf of the schema is documented.
func TestDocsValuesTableMatchesSchema(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot, chartDir, "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	var schema map[string]any
	if err := json.Unmarshal(b, &schema); err != nil {
		t.Fatal(err)
	}
	leaves := map[string]bool{}
	var walk func(prefix string, props map[string]any)
	walk = func(prefix string, props map[string]any) {
		for name, p := range props {
			sub, _ := p.(map[string]any)["properties"].(map[string]any)
			if len(sub) == 0 {
				leaves[prefix+name] = true
				continue
			}
			walk(prefix+name+".", sub)
		}
	}
	walk("", schema["properties"].(map[string]any))
	documented := map[string]bool{}
	for _, row := range tableRows(t, "docs/install.md", "## Values") {
		documented[row[0]] = true
		if !leaves[row[0]] && !hasLeafUnder(leaves, row[0]) {
			t.Errorf("docs/install.md documents %s, which values.schema.json does not have", row[0])
		}
	}
	for leaf := range leaves {
		if !documented[leaf] && !documentedParent(documented, leaf) {
			t.Errorf("values.schema.json has %s, which docs/install.md's values table does not document", leaf)
		}
	}
}

func hasLeafUnder(leaves map[string]bool, key string) bool {
	for l := range leaves {
		if strings.HasPrefix(l, key+".") {
			return true
		}
	}
	return false
}

// documentedParent: a documented object (resources, updateStrategy) covers
// its schema's leaves.
func documentedParent(documented map[string]bool, leaf string) bool {
	for i := strings.LastIndex(leaf, "."); i > 0; i = strings.LastIndex(leaf[:i], ".") {
		if documented[leaf[:i]] {
			return true
		}
	}
	return false
}

// TestDocsIstioValuesTable: docs/istio-compatibility.md's table of
// istio-cni chart values has a row for every value of Istio's own
// values.yaml (the module test/istio pins), and every sluice chart value a
// row names ("chart `x`") exists in values.yaml.
func TestDocsIstioValuesTable(t *testing.T) {
	rows := tableRows(t, "docs/istio-compatibility.md", "## istio-cni chart values and agent settings")
	if len(rows) < 10 {
		t.Fatalf("read %d rows", len(rows))
	}
	raw, err := os.ReadFile(filepath.Join(repoRoot, "docs/istio-compatibility.md"))
	if err != nil {
		t.Fatal(err)
	}
	var istioCol []string // the first column's code spans, from the raw text (tableRows strips backticks)
	section := string(raw)[strings.Index(string(raw), "## istio-cni chart values and agent settings"):]
	section = section[:strings.Index(section[3:], "\n## ")+3]
	for _, line := range strings.Split(section, "\n") {
		if cells := strings.Split(line, " | "); strings.HasPrefix(line, "| ") && len(cells) > 1 {
			for _, m := range codeSpan.FindAllStringSubmatch(cells[0], -1) {
				istioCol = append(istioCol, m[1])
			}
			checkChartValues(t, line, cells[1])
		}
	}
	b, err := os.ReadFile(filepath.Join(istioCNIChart(t), "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	defaults, _ := doc["_internal_defaults_do_not_set"].(map[string]any)
	var keys []string
	for k, v := range defaults {
		switch k {
		case "ambient", "repair", "logging":
			for sub := range v.(map[string]any) {
				keys = append(keys, k+"."+sub)
			}
		case "global":
		default:
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		if !slices.Contains(istioCol, k) {
			t.Errorf("Istio's istio-cni values.yaml has %s; docs/istio-compatibility.md's table has no row naming it", k)
		}
	}
}

// checkChartValues: each `x` after "chart " in a row's sluice column is a
// key of values.yaml.
func checkChartValues(t *testing.T, line, cell string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, chartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var values map[string]any
	if err := yaml.Unmarshal(b, &values); err != nil {
		t.Fatal(err)
	}
	for _, seg := range regexp.MustCompile("chart ((?:`[^`]+`(?:, | and )?)+)").FindAllStringSubmatch(cell, -1) {
		for _, m := range codeSpan.FindAllStringSubmatch(seg[1], -1) {
			key := strings.Fields(strings.TrimSuffix(m[1], ":"))[0]
			key = strings.TrimSuffix(key, ":")
			if _, ok := lookup(values, key); !ok {
				t.Errorf("docs/istio-compatibility.md names chart value %s, which values.yaml does not have:\n%s", key, line)
			}
		}
	}
}
