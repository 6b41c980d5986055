package nstest

import (
	"crypto/rand"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// PodCgroup creates a cgroup whose path names the pod the way a kubelet's
// cgroup driver ("cgroupfs" or "systemd") does, under a directory unique to
// the test, and removes it when the test ends — after the test's processes
// are killed, since cleanups run last registered first. A cgroup v2 mount
// is preferred, a v1 hierarchy the fallback.
func PodCgroup(t testing.TB, driver, uid string) string {
	t.Helper()
	RequireRoot(t)
	mount, name := cgroupMount(t), fmt.Sprintf("sluice-test-%d-%s", os.Getpid(), uid[:8])
	if driver == "systemd" {
		name += ".slice"
	}
	top := filepath.Join(mount, name)
	var leaf string
	switch driver {
	case "cgroupfs":
		leaf = filepath.Join(top, "besteffort", "pod"+uid)
	case "systemd":
		leaf = filepath.Join(top, "kubepods-besteffort-pod"+strings.ReplaceAll(uid, "-", "_")+".slice")
	default:
		t.Fatalf("unknown cgroup driver %q", driver)
	}
	if err := os.MkdirAll(leaf, 0o755); err != nil {
		t.Fatalf("create cgroup %s: %v", leaf, err)
	}
	t.Cleanup(func() {
		if err := RemoveCgroup([]string{mount}, name, 5*time.Second); err != nil {
			t.Error(err)
		}
	})
	return leaf
}

// cgroupMount is a cgroup2 mount point, or failing that a v1 one.
func cgroupMount(t testing.TB) string {
	t.Helper()
	points, fstypes, err := cgroupMounts()
	if err != nil {
		t.Fatal(err)
	}
	v1 := ""
	for i, p := range points {
		if fstypes[i] == "cgroup2" {
			return p
		}
		if v1 == "" {
			v1 = p
		}
	}
	if v1 == "" {
		t.Skip("no cgroup mount to place test processes in")
	}
	return v1
}

// TestIP is a random address from the benchmarking range (198.18.0.0/15),
// so no other netns on the machine holds it.
func TestIP(t testing.TB) netip.Addr {
	t.Helper()
	b := make([]byte, 3)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return netip.AddrFrom4([4]byte{198, 18 + b[0]&1, b[1], b[2] | 1})
}
