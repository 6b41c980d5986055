package image

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// The refs the images are tagged with. "localhost/" keeps a runtime from
// ever trying to pull them from a registry.
const (
	SluiceRepo = "localhost/sluice"
	TestAppRef = "localhost/sluice-testapp:test"
)

// The packages of the images' binaries.
const (
	PluginPackage  = "github.com/sluicemesh/sluice/plugin"
	AgentPackage   = "github.com/sluicemesh/sluice/daemon"
	TestAppPackage = "github.com/sluicemesh/sluice/test/node/testapp"
)

// GoBinary builds pkg as a static linux binary for this machine's
// architecture, the way the Makefile and the Dockerfile do, and returns
// its bytes. It runs `go build` in the current directory, which must lie
// inside this module.
func GoBinary(ctx context.Context, pkg, version string) ([]byte, error) {
	dir, err := os.MkdirTemp("", "sluice-image-")
	if err != nil {
		return nil, fmt.Errorf("build %s: %w", pkg, err)
	}
	defer os.RemoveAll(dir)
	out := filepath.Join(dir, "bin")
	ldflags := "-s -w -X github.com/sluicemesh/sluice/internal/buildinfo.Version=" + version
	cmd := exec.CommandContext(ctx, "go", "build", "-tags", "grpcnotrace", "-trimpath", "-ldflags", ldflags, "-o", out, pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH)
	if b, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("build %s: %w\n%s", pkg, err, b)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		return nil, fmt.Errorf("build %s: %w", pkg, err)
	}
	return b, nil
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
