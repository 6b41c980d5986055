package podns

import (
	"crypto/rand"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicemesh/sluice/test/harness/nstest"
)

func TestFindPodNetnsByCgroup(t *testing.T) {
	for _, driver := range []string{"cgroupfs", "systemd"} {
		t.Run(driver, func(t *testing.T) {
			uid := newUID(t)
			pod := nstest.New(t, "pod")
			cg := nstest.PodCgroup(t, driver, uid)
			first := sleepIn(t, pod, cg)
			sleepIn(t, pod, cg) // a later container of the same pod
			// The host-side processes of the node are never the answer.
			sleepIn(t, nil, cg)

			got, err := FindPodNetns("/proc", uid, nil)
			if err != nil {
				t.Fatal(err)
			}
			if want := "/proc/" + strconv.Itoa(first) + "/ns/net"; got != want {
				t.Errorf("FindPodNetns = %s, want the pod's oldest process %s", got, want)
			}
			waitNetnsOf(t, got, pod.Path)
		})
	}
}

func TestFindPodNetnsByIP(t *testing.T) {
	pod := nstest.New(t, "pod")
	v4, v6 := testIPs(t)
	// The peer is another netns with a process, holding none of the IPs.
	other := nstest.New(t, "other")
	nstest.Veth(t, pod, "eth0", []string{v4.String() + "/32", v6.String() + "/128"}, other, "veth0", nil)
	pid := sleepIn(t, pod, "")
	sleepIn(t, other, "")

	for _, ips := range [][]netip.Addr{{v4}, {v6}, {netip.MustParseAddr("192.0.2.1"), v6}} {
		got, err := FindPodNetns("/proc", newUID(t), ips)
		if err != nil {
			t.Fatalf("by %v: %v", ips, err)
		}
		if want := "/proc/" + strconv.Itoa(pid) + "/ns/net"; got != want {
			t.Errorf("by %v: FindPodNetns = %s, want %s", ips, got, want)
		}
	}
}

func TestFindPodNetnsNotFound(t *testing.T) {
	uid := newUID(t)
	// A host-network pod: its process is in the pod's cgroup but shares
	// the agent's netns, which must never be programmed.
	sleepIn(t, nil, nstest.PodCgroup(t, "cgroupfs", uid))
	_, err := FindPodNetns("/proc", uid, []netip.Addr{netip.MustParseAddr("192.0.2.77")})
	if !errors.Is(err, ErrPodNetnsNotFound) {
		t.Fatalf("err = %v, want ErrPodNetnsNotFound", err)
	}
	for _, want := range []string{"pod" + uid, "pod" + systemdUID(uid), "192.0.2.77"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say it looked for %s", err, want)
		}
	}
	if _, err := FindPodNetns("/proc", "", nil); err == nil {
		t.Error("FindPodNetns with nothing to look for succeeded")
	}
}

func TestNamesPod(t *testing.T) {
	const uid = "0b1c2d3e-aaaa-bbbb-cccc-000000000001"
	needles := []string{"pod" + uid, "pod" + systemdUID(uid)}
	for path, want := range map[string]bool{
		"/kubepods/besteffort/pod" + uid + "/abc123": true,
		"/kubepods/pod" + uid:                        true,
		"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + systemdUID(uid) + ".slice/cri-containerd-abc.scope": true,
		"/kubepods/besteffort/pod" + uid + "0/abc": false,
		"/kubepods/besteffort/pod0b1c2d3e":         false,
		"/":                                        false,
	} {
		if got := namesPod(path, needles); got != want {
			t.Errorf("namesPod(%q) = %v, want %v", path, got, want)
		}
	}
}

func TestStartTimeParsesOddCommandNames(t *testing.T) {
	path := filepath.Join(t.TempDir(), "stat")
	// A command name may hold spaces and ')': fields count from the last ')'.
	stat := "42 (a) b (c)) S 1 42 42 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 987654 1000 10"
	if err := os.WriteFile(path, []byte(stat), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := startTime(path)
	if err != nil || got != 987654 {
		t.Fatalf("startTime = %d, %v; want 987654", got, err)
	}
}

func newUID(t *testing.T) string {
	t.Helper()
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// testIPs are addresses from the benchmarking ranges, random per test, so
// no other namespace on the machine holds them.
func testIPs(t *testing.T) (netip.Addr, netip.Addr) {
	t.Helper()
	b := make([]byte, 3)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	v4 := netip.AddrFrom4([4]byte{198, 18 + b[0]&1, b[1], b[2] | 1})
	v6 := netip.MustParseAddr(fmt.Sprintf("2001:db8:5:1::%x:%x", b[1], b[2]))
	return v4, v6
}

// sleepIn starts a process in ns (nil: the test's own netns) and, when cg
// is set, moves it into that cgroup, as a container of a pod would be. It
// returns the pid once both hold.
func sleepIn(t *testing.T, ns *nstest.NS, cg string) int {
	t.Helper()
	nstest.RequireRoot(t)
	var cmd *exec.Cmd
	if ns != nil {
		cmd = ns.Command("sleep", "300")
	} else {
		cmd = exec.Command("sleep", "300")
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	pid := cmd.Process.Pid
	if ns != nil {
		waitNetnsOf(t, "/proc/"+strconv.Itoa(pid)+"/ns/net", ns.Path)
	}
	if cg != "" {
		if err := os.WriteFile(filepath.Join(cg, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
			t.Fatalf("move %d into %s: %v", pid, cg, err)
		}
	}
	return pid
}
