package istiovalues

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"sigs.k8s.io/yaml"
)

// FuzzDocument: whatever the input file holds, migrate-values' output
// holds no rune a terminal or YAML acts on but the newlines, its lines
// that are not comments are exactly the marshalled values, and reading
// the whole output back gives those values: nothing hides in a comment.
func FuzzDocument(f *testing.F) {
	for _, s := range []string{
		"chained: false\n\"x\\rimage: {repository: evil.example/sluice}\\r#\": 1\n",
		"cni: {cniBinDir: \"/a\\u2028b: c\", podAnnotations: {\"k\\u0085v\": \"\\e[2J\"}}\n",
		"global: {hub: \"mirror\\rimage:\", variant: \"\\t\"}\nvariant: \"x\\ny\"\n",
		"apiVersion: install.istio.io/v1alpha1\nkind: IstioOperator\nspec: {profile: ambient, values: {global: {platform: k3s}}}\n",
		"profile: ambient\nplatform: openshift\nenv: {\"A\\rB\": 1}\n",
	} {
		f.Add([]byte(s), "values.yaml")
	}
	f.Add([]byte("{}"), "a\rimage: {repository: x}")
	f.Fuzz(func(t *testing.T, in []byte, source string) {
		r, err := Convert(in)
		if err != nil {
			return
		}
		doc := r.Document(source)
		if !utf8.Valid(doc) {
			t.Fatalf("output is not UTF-8: %q", doc)
		}
		for _, c := range string(doc) {
			if c != '\n' && !unicode.IsGraphic(c) {
				t.Fatalf("output holds %U: %q", c, doc)
			}
		}
		var body []string
		for _, l := range strings.SplitAfter(string(doc), "\n") {
			if !strings.HasPrefix(l, "#") {
				body = append(body, l)
			}
		}
		want := Marshal(r.Values)
		if got := strings.Join(body, ""); got != string(want) {
			t.Fatalf("lines outside comments %q, the values marshal as %q", got, want)
		}
		var back map[string]any
		if err := yaml.Unmarshal(doc, &back); err != nil {
			t.Fatalf("output does not parse: %v\n%q", err, doc)
		}
		a, _ := json.Marshal(back)
		b, _ := json.Marshal(r.Values)
		if len(r.Values) == 0 {
			b = []byte("{}")
		}
		if !bytes.Equal(a, b) {
			t.Fatalf("output reads back as %s, the values are %s\n%q", a, b, doc)
		}
	})
}
