package podns

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicemesh/sluice/test/harness/nstest"
)

func TestOpenAcceptsNamespacesUnderRoots(t *testing.T) {
	root := t.TempDir()
	pod := nstest.NewIn(t, root, "pod")
	o, err := NewOpener([]string{root, "/proc"}, "/proc")
	if err != nil {
		t.Fatal(err)
	}
	h, err := o.Open(pod.Path)
	if err != nil {
		t.Fatalf("open %s: %v", pod.Path, err)
	}
	h.Close()

	// The runtime's other form: a process of the pod.
	cmd := pod.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	procPath := "/proc/" + strconv.Itoa(cmd.Process.Pid) + "/ns/net"
	waitNetnsOf(t, procPath, pod.Path)
	h, err = o.Open(procPath)
	if err != nil {
		t.Fatalf("open %s: %v", procPath, err)
	}
	h.Close()

	// A relative symlink that stays inside the root is fine.
	link := filepath.Join(root, "alias")
	if err := os.Symlink("pod", link); err != nil {
		t.Fatal(err)
	}
	h, err = o.Open(link)
	if err != nil {
		t.Fatalf("open %s: %v", link, err)
	}
	h.Close()
}

// waitNetnsOf waits until nsenter has switched the child into the pod netns.
func waitNetnsOf(t *testing.T, procPath, want string) {
	t.Helper()
	w, err := os.Stat(want)
	if err != nil {
		t.Fatal(err)
	}
	nstest.Eventually(t, 5*time.Second, func() bool {
		got, err := os.Stat(procPath)
		return err == nil && os.SameFile(got, w)
	}, "%s never entered %s", procPath, want)
}

func TestOpenRefusesHostilePaths(t *testing.T) {
	root := t.TempDir()
	nstest.NewIn(t, root, "pod")
	outside := nstest.New(t, "outside")
	plain := filepath.Join(root, "plain")
	if err := os.WriteFile(plain, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	escape := filepath.Join(root, "escape")
	if err := os.Symlink(outside.Path, escape); err != nil {
		t.Fatal(err)
	}
	toPasswd := filepath.Join(root, "passwd")
	if err := os.Symlink("/etc/passwd", toPasswd); err != nil {
		t.Fatal(err)
	}
	hostChild := exec.Command("sleep", "30")
	if err := hostChild.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hostChild.Process.Kill(); hostChild.Wait() })
	o, err := NewOpener([]string{root, "/proc"}, "/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{
		"",
		"relative/pod",
		"/etc/passwd",
		root + "/../" + filepath.Base(root) + "/pod",
		escape,
		toPasswd,
		plain,
		"/proc/self/ns/net",
		"/proc/thread-self/ns/net",
		"/proc/" + strconv.Itoa(hostChild.Process.Pid) + "/ns/net", // the agent's own netns
		"/proc/" + strconv.Itoa(os.Getpid()) + "/ns/mnt",
		"/proc/" + strconv.Itoa(os.Getpid()) + "/ns/../ns/net",
	} {
		h, err := o.Open(path)
		if err == nil {
			h.Close()
			t.Errorf("Open(%q) succeeded, want refusal", path)
			continue
		}
		var re *RuleError
		if !errors.As(err, &re) {
			t.Errorf("Open(%q) = %v, want a RuleError", path, err)
		}
	}
}

func TestOpenMissingIsNotExist(t *testing.T) {
	nstest.RequireRoot(t)
	root := t.TempDir()
	o, err := NewOpener([]string{root}, "/proc")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := o.Open(filepath.Join(root, "gone")); !errors.Is(err, ErrNotExist) {
		t.Errorf("Open(missing) = %v, want ErrNotExist", err)
	}
}

func TestProcOnlyWhenRooted(t *testing.T) {
	nstest.RequireRoot(t)
	o, err := NewOpener([]string{t.TempDir()}, "/proc")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	var re *RuleError
	if _, err := o.Open("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/ns/net"); !errors.As(err, &re) {
		t.Errorf("got %v, want a RuleError", err)
	}
}

// FuzzResolve: whatever locate accepts lies under a root, or is
// /proc/<pid>/ns/net.
func FuzzResolve(f *testing.F) {
	for _, s := range []string{"/var/run/netns/x", "/proc/12/ns/net", "/proc/self/ns/net", "../x", "/a/../b", "/proc/0/ns/net", "/proc/012/ns/net", "/var/run/netns/", "/var/run/netnsx/y"} {
		f.Add(s)
	}
	o := &Opener{Roots: []string{"/var/run/netns", "/proc"}, HostProc: "/host/proc"}
	f.Fuzz(func(t *testing.T, path string) {
		root, rel, err := o.locate(path)
		if err != nil {
			return
		}
		// Whatever is accepted lies under a root, or is /proc/<pid>/ns/net.
		if pid, ok := procNetPath(path); ok {
			if root != "/proc" || rel != pid+"/ns/net" {
				t.Fatalf("locate(%q) = %q, %q", path, root, rel)
			}
			return
		}
		if root != "/var/run/netns" || rel == "" || strings.HasPrefix(rel, "/") || slices.Contains(strings.Split(rel, "/"), "..") {
			t.Fatalf("locate(%q) = %q, %q", path, root, rel)
		}
		if filepath.Join(root, rel) != filepath.Clean(path) {
			t.Fatalf("locate(%q) = %q, %q: not the same path", path, root, rel)
		}
	})
}
