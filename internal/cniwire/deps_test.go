package cniwire_test

import (
	"os/exec"
	"strings"
	"testing"
)

// goList is the non-standard packages pkg depends on (itself included).
func goList(t *testing.T, pkg string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-buildvcs=false", "-deps",
		"-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", pkg).CombinedOutput()
	if err != nil {
		t.Fatalf("go list %s: %v\n%s", pkg, err, out)
	}
	return strings.Fields(string(out))
}

// cniwire exists so the plugin links neither grpc-go nor the protobuf
// runtime: outside the standard library it may depend on protowire and
// what protowire itself imports, nothing else.
func TestImportsOnlyProtowire(t *testing.T) {
	const self = "github.com/sluicemesh/sluice/internal/cniwire"
	allowed := map[string]bool{self: true}
	for _, dep := range goList(t, "google.golang.org/protobuf/encoding/protowire") {
		allowed[dep] = true
	}
	for _, dep := range goList(t, ".") {
		for _, banned := range []string{"google.golang.org/grpc", "github.com/sluicemesh/sluice/api", "google.golang.org/protobuf/proto",
			"google.golang.org/protobuf/reflect", "google.golang.org/protobuf/runtime"} {
			if strings.HasPrefix(dep, banned) {
				t.Errorf("cniwire depends on %s", dep)
			}
		}
		if !allowed[dep] {
			t.Errorf("cniwire depends on %s, which protowire does not", dep)
		}
	}
}
