package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/sluicemesh/sluice/internal/productbuild"
)

// bins is the dir of freshly built binaries the run execs.
type bins struct{ dir string }

// buildAll builds what the run execs, each the way the product is built
// (internal/productbuild: static, stripped, trimmed), so exec times compare
// like for like; the tag changes nothing in the reference binaries. The
// -prof pair adds the sluicebench tag (cpuprofile_bench.go of each: a CPU
// profile on request).
func buildAll(dir string) (bins, error) {
	ctx := context.Background()
	if err := productbuild.Build(ctx, productbuild.Options{}, dir, append(productbuild.Product(),
		productbuild.Target{Name: "loopback", Pkg: "github.com/containernetworking/plugins/plugins/main/loopback"},
		productbuild.Target{Name: "hello", Pkg: "github.com/sluicemesh/sluice/hack/bench/hello"})...); err != nil {
		return bins{}, err
	}
	prof := productbuild.Options{ExtraTags: []string{"sluicebench"}}
	if err := productbuild.Build(ctx, prof, dir,
		productbuild.Target{Name: productbuild.PluginName + "-prof", Pkg: productbuild.PluginPackage},
		productbuild.Target{Name: productbuild.AgentName + "-prof", Pkg: productbuild.AgentPackage}); err != nil {
		return bins{}, err
	}
	return bins{dir: dir}, nil
}

type footprint struct {
	sizes map[string]int64
	execs []series // hello, sluice VERSION, loopback VERSION
	inits []initCost
}

// initCost is one package's init as GODEBUG=inittrace=1 reports it.
type initCost struct {
	pkg   string
	clock string
}

// benchFootprint measures binary sizes and n execs of each binary with
// CNI_COMMAND=VERSION (hello ignores it), interleaved.
func benchFootprint(b bins, n int) (*footprint, error) {
	f := &footprint{sizes: map[string]int64{}}
	names := []string{"hello", "sluice", "loopback"}
	for _, name := range append(names, "sluice-agent") {
		st, err := os.Stat(filepath.Join(b.dir, name))
		if err != nil {
			return nil, err
		}
		f.sizes[name] = st.Size()
	}
	f.execs = []series{{name: "Go hello-world"}, {name: "sluice VERSION"}, {name: "loopback VERSION"}}
	for range n {
		for i, name := range names {
			cmd := exec.Command(filepath.Join(b.dir, name))
			cmd.Env = []string{"CNI_COMMAND=VERSION"}
			start := time.Now()
			if out, err := cmd.CombinedOutput(); err != nil {
				return nil, fmt.Errorf("exec %s: %v: %s", name, err, out)
			}
			f.execs[i].add(time.Since(start))
		}
	}
	cmd := exec.Command(filepath.Join(b.dir, "sluice"))
	cmd.Env = []string{"CNI_COMMAND=VERSION", "GODEBUG=inittrace=1"}
	out, _ := cmd.CombinedOutput()
	for _, l := range strings.Split(string(out), "\n") {
		// init PKG @T ms, C ms clock, B bytes, A allocs
		fl := strings.Fields(l)
		if len(fl) >= 5 && fl[0] == "init" && !strings.HasPrefix(fl[1], "runtime") {
			f.inits = append(f.inits, initCost{pkg: fl[1], clock: fl[4] + " ms"})
		}
	}
	return f, nil
}
