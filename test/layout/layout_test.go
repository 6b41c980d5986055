// Package layout holds the tree's layering: hack/ is commands and scripts
// people run, so no importable code (the product, internal/'s shared and
// build code) may import it; code both need lives under internal/. The
// test harness lives under test/harness/, and nothing the shipped binaries
// link comes from test/ (TestShippedBinariesImportNoHarness). The nf_tables
// encoder sits under daemon/redirect/kernel/internal/, so the compiler lets
// only the kernel package use it.
package layout

import (
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func TestNothingImportsHack(t *testing.T) {
	fset := token.NewFileSet()
	seen := 0
	for _, root := range []string{"daemon", "installer", "plugin", "internal", "api"} {
		err := filepath.WalkDir(filepath.Join("..", "..", root), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") {
				return err
			}
			f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
			if err != nil {
				return err
			}
			seen++
			for _, imp := range f.Imports {
				p, _ := strconv.Unquote(imp.Path.Value)
				if strings.HasPrefix(p, "github.com/sluicemesh/sluice/hack/") {
					t.Errorf("%s imports %s: move what it needs under internal/", path, p)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if seen < 100 {
		t.Fatalf("read only %d files: not run from test/layout?", seen)
	}
}
