package hostprobe

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sluicemesh/sluice/daemon/redirect"
)

// fakeProc is a host /proc: each process a directory with comm, cmdline,
// status and ns/net, the last a symlink to one of two files standing for
// the host netns and another.
type fakeProc struct {
	t               *testing.T
	dir             string
	hostNS, otherNS string
}

func newFakeProc(t *testing.T) *fakeProc {
	t.Helper()
	d := t.TempDir()
	p := &fakeProc{t: t, dir: filepath.Join(d, "proc"), hostNS: filepath.Join(d, "host-net"), otherNS: filepath.Join(d, "other-net")}
	for _, f := range []string{p.hostNS, p.otherNS} {
		if err := os.WriteFile(f, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(p.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func (p *fakeProc) host() nsID {
	var st unix.Stat_t
	if err := unix.Stat(p.hostNS, &st); err != nil {
		p.t.Fatal(err)
	}
	return nsID{uint64(st.Dev), st.Ino}
}

// add puts process pid in, named comm, with argv and fsuid, in the host
// netns or not.
func (p *fakeProc) add(pid int, comm string, argv []string, fsuid uint32, inHost bool) {
	p.t.Helper()
	dir := filepath.Join(p.dir, strconv.Itoa(pid))
	ns := p.otherNS
	if inHost {
		ns = p.hostNS
	}
	status := fmt.Sprintf("Name:\t%s\nUmask:\t0022\nUid:\t%d\t%d\t%d\t%d\nGid:\t0\t0\t0\t0\n", comm, fsuid+1, fsuid+2, fsuid+3, fsuid)
	for _, err := range []error{
		os.MkdirAll(filepath.Join(dir, "ns"), 0o755),
		os.WriteFile(filepath.Join(dir, "comm"), []byte(comm+"\n"), 0o644),
		os.WriteFile(filepath.Join(dir, "cmdline"), []byte(strings.Join(argv, "\x00")+"\x00"), 0o644),
		os.WriteFile(filepath.Join(dir, "status"), []byte(status), 0o644),
		os.Symlink(ns, filepath.Join(dir, "ns", "net")),
	} {
		if err != nil {
			p.t.Fatal(err)
		}
	}
}

func (p *fakeProc) remove(pid int) {
	if err := os.RemoveAll(filepath.Join(p.dir, strconv.Itoa(pid))); err != nil {
		p.t.Fatal(err)
	}
}

// The kubelet is the process named kubelet (or kubelite) whose command line
// names the kubelet, in the host netns; its uid is its filesystem uid.
func TestFindKubelet(t *testing.T) {
	p := newFakeProc(t)
	if _, err := findKubelet(p.dir, p.host()); err == nil {
		t.Fatal("found a kubelet in an empty /proc")
	}
	p.add(10, "kubelet", []string{"/usr/bin/kubelet", "--config=/var/lib/kubelet/config.yaml"}, 1000, false) // another netns: a nested cluster's
	p.add(11, "kubelet", []string{"/opt/app", "--serve"}, 1001, true)                                        // named so, but not one
	p.add(12, "sshd", []string{"/usr/sbin/kubelet"}, 1002, true)                                             // not named so
	if _, err := findKubelet(p.dir, p.host()); err == nil || !strings.Contains(err.Error(), "1 kubelet processes in other netns, 0 not readable") {
		t.Fatalf("err %v, want none found, naming the one in another netns", err)
	}
	p.add(20, "kubelet", []string{"/usr/bin/kubelet", "--v=2"}, 4242, true)
	k, err := findKubelet(p.dir, p.host())
	if err != nil || k.pid != 20 || k.uid != 4242 {
		t.Fatalf("found %+v, %v; want pid 20 with fsuid 4242", k, err)
	}
	k.close()

	p.add(30, "kubelite", []string{"/snap/microk8s/current/kubelite", "--kubelet-args-file=/x"}, 4242, true)
	if k, err = findKubelet(p.dir, p.host()); err != nil || k.uid != 4242 {
		t.Fatalf("two kubelets of one uid: %+v, %v", k, err)
	}
	k.close()
	p.add(31, "kubelite", []string{"/snap/microk8s/current/kubelite", "--kubelet-args-file=/x"}, 0, true)
	if _, err = findKubelet(p.dir, p.host()); err == nil || !strings.Contains(err.Error(), "uid 4242") {
		t.Fatalf("kubelets of two uids: err %v, want them named", err)
	}
}

// A kubelet the agent may not read (no SYS_PTRACE for ns/net) is named in
// the error, not taken for absent; as root every file is readable.
func TestFindKubeletNamesUnreadable(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root reads a mode 0 directory")
	}
	p := newFakeProc(t)
	p.add(20, "kubelet", []string{"/usr/bin/kubelet"}, 0, true)
	dir := filepath.Join(p.dir, "20", "ns")
	if err := os.Chmod(dir, 0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(dir, 0o755) })
	if _, err := findKubelet(p.dir, p.host()); err == nil || !strings.Contains(err.Error(), "1 not readable") {
		t.Fatalf("err %v, want the unreadable kubelet counted", err)
	}
}

// A kubelet held by its /proc directory is gone once it exits, even when
// its pid is taken again: read with the real /proc.
func TestKubeletExitIsSeen(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	dir, err := os.Open(filepath.Join("/proc", strconv.Itoa(cmd.Process.Pid)))
	if err != nil {
		t.Fatal(err)
	}
	k := &kubeletProc{dir: dir, pid: cmd.Process.Pid}
	defer k.close()
	if uid, err := k.readUID(); err != nil || uid != uint32(os.Getuid()) {
		t.Fatalf("running: uid %d, %v; want %d", uid, err, os.Getuid())
	}
	cmd.Process.Kill()
	cmd.Wait()
	if uid, err := k.readUID(); err == nil {
		t.Fatalf("exited: read uid %d", uid)
	}
}

// The probe owner writes the host table with the kubelet's uid, none while
// no kubelet is found, and again when the kubelet restarts under another
// uid; a restart under the same uid and a kubelet that is gone for a while
// leave the table alone.
func TestProbeOwnerFollowsTheKubelet(t *testing.T) {
	p := newFakeProc(t)
	var wrote []string
	o := &Owner{hostProc: p.dir, host: p.host(), auto: true, base: redirect.DefaultHostConfig(),
		log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		ensure: func(hc redirect.HostConfig) error {
			wrote = append(wrote, hc.ProbeUID.String())
			return nil
		}}
	o.uid.Store(-1)
	t.Cleanup(func() { o.kubelet.close() })
	step := func(what string, f func() error, want ...string) {
		t.Helper()
		wrote = nil
		if err := f(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if strings.Join(wrote, ",") != strings.Join(want, ",") {
			t.Errorf("%s: wrote the table with uids %v, want %v", what, wrote, want)
		}
	}
	step("start with no kubelet", o.Start, "none")
	if o.uid.Load() != -1 {
		t.Errorf("metric %d, want -1", o.uid.Load())
	}
	step("still none", o.recheck)
	p.add(100, "kubelet", []string{"kubelet"}, 0, true)
	step("kubelet appears", o.recheck, "0")
	step("kubelet runs on", o.recheck)
	p.remove(100)
	step("kubelet gone", o.recheck)
	p.add(200, "kubelet", []string{"kubelet"}, 0, true)
	step("restarted as the same uid", o.recheck)
	p.remove(200)
	p.add(300, "kubelet", []string{"kubelet"}, 4242, true)
	step("restarted as another uid", o.recheck, "4242")
	if o.uid.Load() != 4242 {
		t.Errorf("metric %d, want 4242", o.uid.Load())
	}

	o.kubelet.close()
	o.kubelet, o.auto = nil, false
	o.base.ProbeUID = redirect.UIDOf(7)
	step("an explicit uid", o.Start, "7")
	step("an explicit uid is not followed", o.recheck)
}
