// Command sluice is the CNI plugin half of sluice. It is chained after the
// cluster's primary CNI and forwards every verb to sluice-agent over a unix
// socket; all decisions and all kernel work happen in the agent.
package main

import (
	"runtime"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/sluicemesh/sluice/internal/buildinfo"
)

// atExit runs when main returns; only the sluicebench build sets it
// (cpuprofile_bench.go).
var atExit = func() {}

func main() {
	// One P: an exec makes one call and runs no goroutines of its own; the
	// runtime's start and GC otherwise woke idle Ps whose threads spun for
	// work. Measured side by side on this VM: 0.7 ms less CPU per ADD with
	// grpc-go's client, ~0.1 ms with grpccall (docs/decisions.md).
	runtime.GOMAXPROCS(1)
	defer atExit()
	skel.PluginMainFuncs(skel.CNIFuncs{
		Add:    cmdAdd,
		Del:    cmdDel,
		Check:  cmdCheck,
		Status: cmdStatus,
		GC:     cmdGC,
	}, version.PluginSupports("0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"), "sluice "+buildinfo.Version)
}
