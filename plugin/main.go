// Command sluice is the CNI plugin half of sluice. It is chained after the
// cluster's primary CNI and forwards every verb to sluice-agent over a unix
// socket; all decisions and all kernel work happen in the agent.
package main

import (
	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/sluicemesh/sluice/internal/buildinfo"
	// One P from the first inits on (its doc says why, with the numbers).
	_ "github.com/sluicemesh/sluice/internal/oneproc"
)

// atExit runs when main returns; only the sluicebench build sets it
// (cpuprofile_bench.go).
var atExit = func() {}

func main() {
	defer atExit()
	skel.PluginMainFuncs(skel.CNIFuncs{
		Add:    cmdAdd,
		Del:    cmdDel,
		Check:  cmdCheck,
		Status: cmdStatus,
		GC:     cmdGC,
	}, version.PluginSupports("0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"), "sluice "+buildinfo.Version)
}
