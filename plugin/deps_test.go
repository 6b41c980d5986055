package main

import (
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"github.com/sluicemesh/sluice/internal/productbuild"
)

// The plugin runs on every pod start: it must stay thin. Kubernetes and
// nftables code belong in the agent, and every package linked is an init
// run on every exec: no grpc-go client, no protobuf runtime, no net/http
// (docs/benchmarks.md, section 5). grpc-go's codes package (and the few it
// imports) names the agent's status codes.
func TestPluginImportsNoHeavyDependencies(t *testing.T) {
	// With the product build's tags (internal/productbuild).
	out, err := exec.Command("go", "list", "-buildvcs=false", "-tags", productbuild.Tags, "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	allowed := map[string]bool{
		"google.golang.org/grpc/codes": true, "google.golang.org/grpc/internal": true,
		"google.golang.org/grpc/grpclog": true, "google.golang.org/grpc/grpclog/internal": true,
		"google.golang.org/grpc/connectivity": true, "google.golang.org/grpc/serviceconfig": true,
		"google.golang.org/protobuf/encoding/protowire": true,
		"google.golang.org/protobuf/internal/errors":    true, "google.golang.org/protobuf/internal/detrand": true,
	}
	banned := []string{"k8s.io/client-go", "github.com/google/nftables", "github.com/sluicemesh/sluice/daemon",
		"github.com/sluicemesh/sluice/api", "google.golang.org/grpc", "google.golang.org/protobuf",
		"golang.org/x/net/trace", "golang.org/x/net/http2", "net/http", "crypto/tls", "html/template"}
	deps := strings.Fields(string(out))
	for _, dep := range deps {
		if allowed[dep] || dep == "golang.org/x/net/http2/hpack" {
			continue
		}
		for _, b := range banned {
			if dep == b || strings.HasPrefix(dep, b+"/") {
				t.Errorf("plugin depends on %s", dep)
			}
		}
	}
	if !strings.Contains(string(out), "github.com/sluicemesh/sluice/internal/grpccall") {
		t.Errorf("go list found no grpccall among %d deps: the check above checked nothing", len(deps))
	}
}

// The plugin runs on one P from its first inits (internal/oneproc, imported
// by main.go); this test binary links the same imports.
func TestPluginRunsOnOneP(t *testing.T) {
	if n := runtime.GOMAXPROCS(0); n != 1 {
		t.Fatalf("GOMAXPROCS %d: internal/oneproc is not imported", n)
	}
}
