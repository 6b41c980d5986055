package ociimage

import (
	"context"
	"runtime"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/sluicemesh/sluice/internal/productbuild"
)

// The refs the images are tagged with. "localhost/" keeps a runtime from
// ever trying to pull them from a registry.
const (
	SluiceRepo = "localhost/sluice"
	TestAppRef = "localhost/sluice-testapp:test"
)

// The packages of the images' binaries.
const (
	PluginPackage  = productbuild.PluginPackage
	AgentPackage   = productbuild.AgentPackage
	TestAppPackage = "github.com/sluicemesh/sluice/test/node/testapp"
)

// GoBinary builds pkg the product's way (internal/productbuild) as a
// linux binary for this machine's architecture, the one the image
// declares, and returns its bytes. It runs `go build` in the current
// directory, which must lie inside this module.
func GoBinary(ctx context.Context, pkg, version string) ([]byte, error) {
	return productbuild.Binary(ctx, productbuild.Options{Version: version, GOOS: "linux", GOARCH: runtime.GOARCH}, pkg)
}

// Sluice is the product image: the agent and the plugin it installs from
// next to itself, nothing else (the Dockerfile's final stage).
func Sluice(plugin, agent []byte, version string) (v1.Image, error) {
	return Build([]File{
		{Path: "/usr/local/bin/sluice", Content: plugin},
		{Path: "/usr/local/bin/sluice-agent", Content: agent},
	}, Config{
		Entrypoint: []string{"/usr/local/bin/sluice-agent"},
		Labels: map[string]string{
			"org.opencontainers.image.title":       "sluice",
			"org.opencontainers.image.description": "CNI node agent for service-mesh traffic capture",
			"org.opencontainers.image.source":      "https://github.com/sluicemesh/sluice",
			"org.opencontainers.image.licenses":    "Apache-2.0",
			"org.opencontainers.image.version":     version,
		},
	})
}

// TestApp is the node tests' application, stand-in proxy and stand-in
// ztunnel (test/node/testapp) at /testapp.
func TestApp(bin []byte) (v1.Image, error) {
	return Build([]File{{Path: "/testapp", Content: bin}}, Config{Entrypoint: []string{"/testapp"}})
}
