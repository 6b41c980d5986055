package redirect

import (
	"os/exec"
	"strings"
	"testing"
)

// What a pod gets (Spec, Build, Render, the host table, the nft model) is
// pure: no netlink, no netns, no syscalls beyond the standard library's.
// The kernel is package redirect/kernel's, behind the Kernel interface, so
// a rule change is tested here as non-root in milliseconds.
func TestPureImportsNoKernel(t *testing.T) {
	out, err := exec.Command("go", "list", "-buildvcs=false", "-deps", ".", "./nft").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	banned := []string{"github.com/vishvananda/netlink", "github.com/vishvananda/netns", "github.com/mdlayher/netlink",
		"github.com/google/nftables", "golang.org/x/sys", "github.com/sluicemesh/sluice/internal/nlsock",
		"github.com/sluicemesh/sluice/daemon/redirect/kernel"}
	deps := strings.Fields(string(out))
	for _, dep := range deps {
		for _, b := range banned {
			if dep == b || strings.HasPrefix(dep, b+"/") {
				t.Errorf("daemon/redirect depends on %s", dep)
			}
		}
	}
	if !strings.Contains(string(out), "github.com/sluicemesh/sluice/daemon/redirect/nft") {
		t.Errorf("go list found no redirect/nft among %d deps: the check above checked nothing", len(deps))
	}
}
