package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"unicode"
	"unicode/utf8"

	"sigs.k8s.io/yaml"
)

// view is what a command prints: its table form, or the value itself
// marshalled for -o json|yaml (field names in lowerCamel, as kubectl's).
type view interface {
	table(w io.Writer) error
}

func render(out io.Writer, format string, v view) error {
	switch format {
	case "json":
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return fmt.Errorf("marshal JSON: %w", err)
		}
		_, err = fmt.Fprintf(out, "%s\n", b)
		return err
	case "yaml":
		b, err := yaml.Marshal(v)
		if err != nil {
			return fmt.Errorf("marshal YAML: %w", err)
		}
		_, err = out.Write(b)
		return err
	}
	return v.table(out)
}

// printable escapes what a terminal would act on instead of showing:
// control characters (ESC sequences that move the cursor, retitle the
// window or clear the screen), other non-graphic runes (bidi overrides)
// and bytes that are not UTF-8. Pod names, annotations and the agent's
// messages come from people who may not be the one reading them. JSON and
// YAML escape them themselves.
func printable(s string) string {
	return escape(s, false)
}

// printableText is printable for multi-line text (a ruleset): newlines
// and tabs stay.
func printableText(s string) string {
	return escape(s, true)
}

func escape(s string, text bool) string {
	clean := true
	for _, r := range s {
		if !shown(r, text) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case shown(r, text):
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

func shown(r rune, text bool) bool {
	if text && (r == '\n' || r == '\t') {
		return true
	}
	return r != utf8.RuneError && unicode.IsGraphic(r)
}
