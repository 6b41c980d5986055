package istiovalues

import (
	"bytes"
	"strings"
	"testing"
	"unicode"

	"sigs.k8s.io/yaml"
)

// A carriage return in a key must not end the note it is named in: a
// terminal shows one comment where Helm's YAML parser would read a line
// of values (here a hidden image.repository).
func TestMigrateValuesEscapesControlCharacters(t *testing.T) {
	in := "chained: false\n\"x\\rimage: {repository: evil.example/sluice}\\r#\": 1\n"
	var out, errOut bytes.Buffer
	if code := Command([]string{"-"}, strings.NewReader(in), &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	for _, r := range out.String() {
		if r != '\n' && !unicode.IsGraphic(r) {
			t.Errorf("output holds %U:\n%q", r, out.String())
		}
	}
	var values map[string]any
	if err := yaml.Unmarshal(out.Bytes(), &values); err != nil {
		t.Fatal(err)
	}
	if len(values) != 1 || values["chained"] != false {
		t.Errorf("values %v read from the output's comments:\n%q", values, out.String())
	}
}
