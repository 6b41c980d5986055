package layout

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// Ambient enrolment has one owner, daemon/ambientmesh (issue #39): rpc
// reaches ztunnel only through it, so rpc's code imports no ztunnel, and
// no package but the owner builds the redirection annotator, the ZDS
// server or the host probe table.
func TestAmbientEnrolmentHasOneOwner(t *testing.T) {
	fset := token.NewFileSet()
	files, err := filepath.Glob(filepath.Join("..", "..", "daemon", "rpc", "*.go"))
	if err != nil || len(files) < 5 {
		t.Fatalf("daemon/rpc: %d files, %v: not run from test/layout?", len(files), err)
	}
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			if p, _ := strconv.Unquote(imp.Path.Value); p == "github.com/sluicemesh/sluice/daemon/ztunnel" {
				t.Errorf("%s imports %s: reach ztunnel through daemon/ambientmesh", path, p)
			}
		}
	}
	err = filepath.WalkDir(filepath.Join("..", "..", "daemon"), func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		if strings.Contains(filepath.ToSlash(path), "daemon/ambientmesh/") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, call := range []struct{ text, what, owner string }{
			{"redirection.New(", "a redirection annotator", "ambientmesh.New"},
			{"ztunnel.New(", "the ZDS server", "ambientmesh.NewNode"},
			{".EnsureHostTable(", "the host probe table", "ambientmesh.NewNode"},
		} {
			if strings.Contains(string(b), call.text) {
				t.Errorf("%s builds %s: daemon/ambientmesh owns it (%s)", path, call.what, call.owner)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
