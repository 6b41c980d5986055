package istiovalues

import (
	"fmt"
	"maps"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"sigs.k8s.io/yaml"
)

// Document is what `sluice-agent migrate-values` prints: a header naming
// source, a `# note:` line for each note, then Marshal(Values). Keys,
// values and the file name come from someone else's file: a carriage
// return in a note is one comment on a terminal and a line of values to
// Helm's YAML parser, so every rune a terminal or YAML would act on is
// escaped, in the comments and in the values. FuzzDocument holds that,
// and that the lines which are not comments are Marshal(Values) and read
// back as Values.
func (r Result) Document(source string) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "# sluice chart values converted from istio-cni's %s by sluice-agent migrate-values.\n", printable(source))
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "# note: %s\n", printable(n))
	}
	b.Write(Marshal(r.Values))
	return []byte(b.String())
}

// Marshal writes values as block YAML in which every rune is graphic, a
// space or a newline: a string that is not plainly safe is double-quoted
// with every other rune escaped. yaml.Marshal would leave YAML's own line
// separators (U+2028), bidi overrides and NEL raw or fail on them.
func Marshal(values map[string]any) []byte {
	if len(values) == 0 {
		return []byte("{}\n")
	}
	var b strings.Builder
	writeMap(&b, values, 0, false)
	return []byte(b.String())
}

// writeMap writes m's keys at indent; with afterDash the first one goes
// on the current line (a list item's "- ").
func writeMap(b *strings.Builder, m map[string]any, indent int, afterDash bool) {
	for i, k := range slices.Sorted(maps.Keys(m)) {
		if i > 0 || !afterDash {
			b.WriteString(strings.Repeat(" ", indent))
		}
		b.WriteString(scalar(k) + ":")
		writeValue(b, m[k], indent+2)
	}
}

// writeValue writes v after a "key:" or "-": inline if it is a scalar or
// empty, on the next lines, indented, otherwise.
func writeValue(b *strings.Builder, v any, indent int) {
	switch x := v.(type) {
	case map[string]any:
		if len(x) == 0 {
			b.WriteString(" {}\n")
			return
		}
		b.WriteString("\n")
		writeMap(b, x, indent, false)
	case []any:
		if len(x) == 0 {
			b.WriteString(" []\n")
			return
		}
		b.WriteString("\n")
		for _, e := range x {
			b.WriteString(strings.Repeat(" ", indent) + "-")
			if m, ok := e.(map[string]any); ok && len(m) > 0 {
				b.WriteString(" ")
				writeMap(b, m, indent+2, true)
				continue
			}
			writeValue(b, e, indent+2)
		}
	default:
		b.WriteString(" " + scalar(x) + "\n")
	}
}

// plain is what may stand unquoted; it must also read back as the same
// string (not true, null, yes or a number).
var plain = regexp.MustCompile(`^[A-Za-z_/][A-Za-z0-9_./-]*$`)

func scalar(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case bool:
		return strconv.FormatBool(x)
	case float64:
		if x == math.Trunc(x) && math.Abs(x) < 1<<53 {
			return strconv.FormatInt(int64(x), 10)
		}
		return strconv.FormatFloat(x, 'g', -1, 64)
	case int, int64:
		return fmt.Sprint(x)
	case string:
		if plain.MatchString(x) {
			var back any
			if yaml.Unmarshal([]byte(x), &back) == nil && back == x {
				return x
			}
		}
		return quote(x)
	}
	return quote(fmt.Sprint(v))
}

// quote is YAML's double-quoted style with every rune that is not graphic
// or a space escaped; bytes that are not UTF-8 become U+FFFD, as JSON reads them.
func quote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r != utf8.RuneError && unicode.IsGraphic(r):
			b.WriteRune(r)
		case r < 0x100:
			fmt.Fprintf(&b, `\x%02x`, r)
		case r < 0x10000:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			fmt.Fprintf(&b, `\U%08x`, r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// printable escapes control characters, other non-graphic runes (YAML's
// line breaks NEL, LS and PS among them) and bytes that are not UTF-8, as
// the CLI's tables do.
func printable(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r != utf8.RuneError && unicode.IsGraphic(r):
			b.WriteRune(r)
		case r < 0x100:
			fmt.Fprintf(&b, `\x%02x`, r)
		default:
			fmt.Fprintf(&b, `\u%04x`, r)
		}
		i += n
	}
	return b.String()
}
