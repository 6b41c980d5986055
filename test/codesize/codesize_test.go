// Package codesize holds the size limits of the product code (daemon/,
// installer/, plugin/, internal/ without tests): a file over 400 lines or a
// function over 60 asks to be split along a line a newcomer could guess.
package codesize

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

const maxFileLines, maxFuncLines = 400, 60

func TestProductCodeSize(t *testing.T) {
	fset := token.NewFileSet()
	for _, root := range []string{"daemon", "installer", "plugin", "internal"} {
		err := filepath.WalkDir(filepath.Join("..", "..", root), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") || strings.HasSuffix(path, ".pb.go") {
				return err
			}
			f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
			if err != nil {
				return err
			}
			if n := fset.Position(f.End()).Line; n > maxFileLines {
				t.Errorf("%s: %d lines, over %d", path, n, maxFileLines)
			}
			for _, decl := range f.Decls {
				if fn, ok := decl.(*ast.FuncDecl); ok && fn.Body != nil {
					if n := fset.Position(fn.End()).Line - fset.Position(fn.Pos()).Line + 1; n > maxFuncLines {
						t.Errorf("%s: func %s is %d lines, over %d", path, fn.Name.Name, n, maxFuncLines)
					}
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}
