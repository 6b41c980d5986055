package deploy

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// decisions.md is a reference: what is decided, why, and where the
// evidence is. Mechanism belongs in the package docs and figures in
// docs/history/, so these bounds hold it to a size a reader can scan.
const (
	decisionsMaxWords     = 6000
	decisionsMaxEntryWord = 100
)

// TestDecisionsStayAReference fails when docs/decisions.md passes
// decisionsMaxWords in all, or any one entry (a top-level "- " bullet with
// its continuation lines) passes decisionsMaxEntryWord. Words are counted as
// `wc -w` counts them: runs of non-space characters.
func TestDecisionsStayAReference(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot, "docs/decisions.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	total := len(strings.Fields(text))
	entries := decisionEntries(text)
	if len(entries) < 50 {
		t.Fatalf("found only %d entries in docs/decisions.md: are they still top-level \"- \" bullets?", len(entries))
	}
	sort.SliceStable(entries, func(i, j int) bool { return entries[i].words > entries[j].words })
	t.Logf("docs/decisions.md: %d words, %d entries, the largest %d words (line %d)",
		total, len(entries), entries[0].words, entries[0].line)
	if total > decisionsMaxWords {
		t.Errorf("docs/decisions.md has %d words, more than %d: move mechanism into the package docs and figures into docs/history/",
			total, decisionsMaxWords)
	}
	var over []string
	for _, e := range entries {
		if e.words > decisionsMaxEntryWord {
			over = append(over, fmt.Sprintf("line %d: %d words: %s", e.line, e.words, e.head))
		}
	}
	if len(over) > 0 {
		t.Errorf("%d entries of docs/decisions.md have more than %d words (what, why, a link; the rest goes to the package doc or docs/history/):\n%s",
			len(over), decisionsMaxEntryWord, strings.Join(over, "\n"))
	}
}

type decisionEntry struct {
	line  int    // 1-based line of the bullet
	words int    // as wc -w counts them
	head  string // the bullet's first line, cut short
}

// decisionEntries splits text into its top-level bullets: a line starting
// "- " begins one, and indented lines after it continue it; a blank line, a
// heading or any other unindented line ends it.
func decisionEntries(text string) []decisionEntry {
	var entries []decisionEntry
	var cur *decisionEntry
	for i, line := range strings.Split(text, "\n") {
		switch {
		case strings.HasPrefix(line, "- "):
			head := line
			if len(head) > 80 {
				head = head[:80] + "…"
			}
			entries = append(entries, decisionEntry{line: i + 1, head: head})
			cur = &entries[len(entries)-1]
		case cur != nil && line != "" && (line[0] == ' ' || line[0] == '\t'):
		default:
			cur = nil
			continue
		}
		cur.words += len(strings.Fields(line))
	}
	return entries
}
