package controlplane

import (
	"embed"
	"testing"
)

// The rulesets a pod of a Node gets, as nft text: testdata/<name>.nft,
// written by `go test ./test/harness/controlplane -update` from what the
// Node's policy decides for each kind of pod (golden_test.go), so a row
// names the file and a reviewer reads what the pod holds.
const (
	// GoldenSidecar is an injected pod's (IPv4; Istio's status port 15020
	// excluded from outbound capture).
	GoldenSidecar = "sidecar"
	// GoldenAmbient is an ambient pod's (both of the node's families, DNS
	// captured: --ambient-dns-capture's default).
	GoldenAmbient = "ambient"
)

//go:embed testdata/*.nft
var goldens embed.FS

// Golden is the nft text of testdata/name.nft; "" is no table.
func Golden(t *testing.T, name string) string {
	t.Helper()
	if name == "" {
		return ""
	}
	b, err := goldens.ReadFile("testdata/" + name + ".nft")
	if err != nil {
		t.Fatalf("golden %s: %v (run go test ./test/harness/controlplane -update)", name, err)
	}
	return string(b)
}
