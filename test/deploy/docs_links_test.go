package deploy

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// TestDocsLinksResolve: every relative link in README.md and the docs
// (docs/, docs/history/, the chart's README) names a file that exists, and
// every #anchor a heading of the file it points into, so moving or
// renaming a section cannot leave a reader at a dead end.
func TestDocsLinksResolve(t *testing.T) {
	docs := []string{"README.md"}
	for _, dir := range []string{"docs", "deploy"} {
		err := filepath.WalkDir(filepath.Join(repoRoot, dir), func(p string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() && strings.HasSuffix(p, ".md") {
				rel, _ := filepath.Rel(repoRoot, p)
				docs = append(docs, rel)
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(docs) < 10 {
		t.Fatalf("found only %d docs: %q", len(docs), docs)
	}
	for _, doc := range docs {
		for _, bad := range brokenLinks(t, doc) {
			t.Errorf("%s: %s", doc, bad)
		}
	}
}

var mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// brokenLinks lists doc's relative links that do not resolve.
func brokenLinks(t *testing.T, doc string) []string {
	var bad []string
	for _, target := range links(t, doc) {
		if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
			continue
		}
		path, anchor, _ := strings.Cut(target, "#")
		file := doc
		if path != "" {
			file = filepath.Join(filepath.Dir(doc), path)
			if _, err := os.Stat(filepath.Join(repoRoot, file)); err != nil {
				bad = append(bad, fmt.Sprintf("link %q: no file %s", target, file))
				continue
			}
		}
		if anchor == "" || !strings.HasSuffix(file, ".md") {
			continue
		}
		if !anchors(t, file)[anchor] {
			bad = append(bad, fmt.Sprintf("link %q: %s has no heading for #%s", target, file, anchor))
		}
	}
	return bad
}

// links returns the targets of doc's markdown links outside code blocks.
func links(t *testing.T, doc string) []string {
	var out []string
	fenced := false
	for _, line := range strings.Split(read(t, doc), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if fenced {
			continue
		}
		for _, m := range mdLink.FindAllStringSubmatch(line, -1) {
			out = append(out, m[1])
		}
	}
	return out
}

// anchors returns the anchors GitHub makes for doc's headings: lower case,
// punctuation dropped, spaces as hyphens, "-1", "-2" for repeats.
func anchors(t *testing.T, doc string) map[string]bool {
	seen := map[string]int{}
	out := map[string]bool{}
	fenced := false
	for _, line := range strings.Split(read(t, doc), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
		}
		if fenced || !strings.HasPrefix(line, "#") {
			continue
		}
		var b strings.Builder
		for _, r := range strings.ToLower(strings.TrimSpace(strings.TrimLeft(line, "#"))) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			out[fmt.Sprintf("%s-%d", a, n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}

func read(t *testing.T, doc string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, doc))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestArchitectureNamesEveryPackage: docs/architecture.md's package table
// names every Go package of the product and its suites, and README names
// every package of daemon/ and internal/, so moving or adding a package
// without its line in the map fails here rather than in a reader's grep.
func TestArchitectureNamesEveryPackage(t *testing.T) {
	arch, readme := read(t, "docs/architecture.md"), read(t, "README.md")
	pkgs := map[string]bool{}
	for _, top := range []string{"daemon", "internal", "installer", "plugin", "test"} {
		err := filepath.WalkDir(filepath.Join(repoRoot, top), func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && d.Name() == "testdata" {
				return filepath.SkipDir
			}
			if !d.IsDir() && strings.HasSuffix(p, ".go") {
				rel, _ := filepath.Rel(repoRoot, filepath.Dir(p))
				pkgs[filepath.ToSlash(rel)] = true
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(pkgs) < 30 {
		t.Fatalf("found only %d packages", len(pkgs))
	}
	for p := range pkgs {
		if !strings.Contains(arch, "`"+p+"/`") {
			t.Errorf("docs/architecture.md does not name `%s/` (the Every package table)", p)
		}
		dir, name := filepath.Split(p)
		if (dir == "daemon/" || dir == "internal/") && !strings.Contains(readme, "`"+name+"`") {
			t.Errorf("README.md does not name %s's package `%s`", dir, name)
		}
	}
}
