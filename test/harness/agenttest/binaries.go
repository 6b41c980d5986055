// Package agenttest runs the real sluice binaries for the suites that test
// them whole (test/e2e, test/hostile, test/nri): it builds them the
// product's way (internal/productbuild) once per test binary, gives a node
// (a netns with the agent's paths and CNI dirs), and runs a CNI chain
// through libcni as a runtime would. Each suite keeps only what is its
// own: its agent flags, its attacks, its containerd config. The agent is
// started with proctest and containerd with containerdtest.
//
// Builds go to a temp dir (the go build cache makes a warm one only the
// links). Node is the one node of the three suites; test/nri's has a mount
// namespace of its own (NodeOptions.PrivateRun).
package agenttest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/sluicemesh/sluice/internal/productbuild"
)

// Bin is a directory of freshly built binaries, readable by any uid (the
// hostile suite's attacker runs as nobody).
type Bin struct{ Dir string }

// Reference plugins a chain runs before sluice, at the version go.mod pins.
var (
	Bridge    = productbuild.Target{Name: "bridge", Pkg: "github.com/containernetworking/plugins/plugins/main/bridge"}
	HostLocal = productbuild.Target{Name: "host-local", Pkg: "github.com/containernetworking/plugins/plugins/ipam/host-local"}
	Loopback  = productbuild.Target{Name: "loopback", Pkg: "github.com/containernetworking/plugins/plugins/main/loopback"}
)

// Build builds the plugin and the agent, under their shipped names, and
// extra, into a new temp dir, in one go command run in opt.Dir. The go
// build cache makes a warm build cost only the links.
func Build(ctx context.Context, opt productbuild.Options, extra ...productbuild.Target) (Bin, error) {
	return BuildOnly(ctx, opt, append(productbuild.Product(), extra...)...)
}

// BuildOnly is Build without the product's two binaries.
func BuildOnly(ctx context.Context, opt productbuild.Options, targets ...productbuild.Target) (Bin, error) {
	dir, err := os.MkdirTemp("", "sluice-test-bin-")
	if err == nil {
		err = os.Chmod(dir, 0o755)
	}
	if err != nil {
		return Bin{}, fmt.Errorf("binaries dir: %w", err)
	}
	if err := productbuild.Build(ctx, opt, dir, targets...); err != nil {
		os.RemoveAll(dir)
		return Bin{}, err
	}
	return Bin{Dir: dir}, nil
}

// Path is the binary name in b.
func (b Bin) Path(name string) string { return filepath.Join(b.Dir, name) }

// Plugin and Agent are the product's two binaries.
func (b Bin) Plugin() string { return b.Path(productbuild.PluginName) }
func (b Bin) Agent() string  { return b.Path(productbuild.AgentName) }

// Remove deletes the directory.
func (b Bin) Remove() { os.RemoveAll(b.Dir) }
