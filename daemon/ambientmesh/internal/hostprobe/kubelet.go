package hostprobe

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// The kubelet, as the host probe table needs it: the uid its sockets carry
// (meta skuid). istio-cni's nftables backend reads it from the host's
// /proc the same way: a process named kubelet (or kubelite, MicroK8s's
// all-in-one) whose command line names the kubelet. Unlike istio-cni, which
// takes the first such process anywhere on the machine and its real uid,
// this takes only kubelets in the host netns the table is in (a kubelet in
// a pod or in a nested cluster's node sends nothing through that table),
// refuses kubelets that disagree on their uid, and reads the filesystem uid,
// the one the kernel gives the sockets a process opens.

// kubeletNames are the command names a kubelet runs under.
var kubeletNames = []string{"kubelet", "kubelite"}

// errNoKubelet: no kubelet runs in the host netns.
var errNoKubelet = errors.New("no kubelet process in the host netns")

// nsID is a namespace file's identity.
type nsID struct{ dev, ino uint64 }

// fdNsID is the identity of the namespace fd refers to.
func fdNsID(fd int) (nsID, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nsID{}, err
	}
	return nsID{uint64(st.Dev), st.Ino}, nil
}

// kubeletProc is a kubelet process found under the host's /proc. dir is its
// /proc/<pid> directory, held open: once the process exits every file read
// through it fails, even when its pid has been reused, so a restart is seen
// with one small read.
type kubeletProc struct {
	dir *os.File
	pid int
	uid uint32
}

func (k *kubeletProc) close() {
	if k != nil && k.dir != nil {
		k.dir.Close()
	}
}

// findKubelet is the kubelet running in the netns host, found under
// hostProc. Several kubelets there are one only if they agree on the uid.
func findKubelet(hostProc string, host nsID) (*kubeletProc, error) {
	entries, err := os.ReadDir(hostProc)
	if err != nil {
		return nil, fmt.Errorf("find the kubelet: list processes in %s: %w", hostProc, err)
	}
	var found *kubeletProc
	elsewhere, unreadable := 0, 0
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 0 {
			continue
		}
		comm, err := os.ReadFile(filepath.Join(hostProc, e.Name(), "comm"))
		if err != nil || !isKubeletName(string(bytes.TrimSpace(comm))) {
			continue
		}
		k, err := openKubelet(hostProc, pid, host)
		switch {
		case errors.Is(err, errOtherNetns):
			elsewhere++
			continue
		case errors.Is(err, fs.ErrPermission):
			unreadable++ // ns/net needs ptrace access: SYS_PTRACE
			continue
		case err != nil:
			continue // exited, or not a kubelet after all
		case found == nil:
			found = k
			continue
		}
		k.close()
		if k.uid != found.uid {
			found.close()
			return nil, fmt.Errorf("find the kubelet: kubelets in the host netns run as uid %d (pid %d) and uid %d (pid %d)", found.uid, found.pid, k.uid, k.pid)
		}
	}
	if found == nil {
		return nil, fmt.Errorf("%w (under %s; %d kubelet processes in other netns, %d not readable)", errNoKubelet, hostProc, elsewhere, unreadable)
	}
	return found, nil
}

func isKubeletName(comm string) bool {
	for _, n := range kubeletNames {
		if comm == n {
			return true
		}
	}
	return false
}

var errOtherNetns = errors.New("in another netns")

// openKubelet opens /proc/<pid> and reads the process through it: a
// kubelet in netns host, or an error.
func openKubelet(hostProc string, pid int, host nsID) (*kubeletProc, error) {
	dir, err := os.Open(filepath.Join(hostProc, strconv.Itoa(pid)))
	if err != nil {
		return nil, err
	}
	k := &kubeletProc{dir: dir, pid: pid}
	var st unix.Stat_t
	if err := unix.Fstatat(int(dir.Fd()), "ns/net", &st, 0); err != nil {
		dir.Close()
		return nil, err
	}
	if (nsID{uint64(st.Dev), st.Ino}) != host {
		dir.Close()
		return nil, errOtherNetns
	}
	cmdline, err := k.read("cmdline")
	if err == nil && !strings.Contains(strings.ToLower(string(cmdline)), "kubelet") {
		err = errors.New("command line does not name the kubelet")
	}
	if err == nil {
		k.uid, err = k.readUID()
	}
	if err != nil {
		dir.Close()
		return nil, err
	}
	return k, nil
}

// read reads a file of the process through its held directory.
func (k *kubeletProc) read(name string) ([]byte, error) {
	fd, err := unix.Openat(int(k.dir.Fd()), name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("pid %d: %s: %w", k.pid, name, err)
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 1<<16))
	if err != nil {
		return nil, fmt.Errorf("pid %d: %s: %w", k.pid, name, err)
	}
	return b, nil
}

// readUID is the process's filesystem uid (the fourth of status's Uid:
// real, effective, saved, filesystem): a socket's owner is its creator's.
// It fails once the process has exited.
func (k *kubeletProc) readUID() (uint32, error) {
	b, err := k.read("status")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "Uid:"); ok {
			f := strings.Fields(rest)
			if len(f) != 4 {
				break
			}
			uid, err := strconv.ParseUint(f[3], 10, 32)
			if err != nil {
				break
			}
			return uint32(uid), nil
		}
	}
	return 0, fmt.Errorf("pid %d: status: no Uid line with four uids", k.pid)
}
