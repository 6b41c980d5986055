package sysdump

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Dir is a directory the bundle reads: its regular files and nothing
// else. An entry that is a symlink is never followed (it may point out of
// the dir, or at a device), and a FIFO, socket or device is never opened
// (a FIFO would block the read for ever; a device's open may act).
type Dir struct {
	fd   int
	Path string
}

// OpenDir opens dir. With root set (the agent's /proc/<pid>/root), dir is
// the agent's path and resolves inside the agent's root, as the agent sees
// it, with no magic link crossed; symlinks in the path itself are followed
// there (/var/run is one on most nodes), entries inside it never are.
func OpenDir(root, dir string) (*Dir, error) {
	flags := unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC
	if root == "" {
		fd, err := unix.Open(dir, flags, 0)
		if err != nil {
			return nil, &os.PathError{Op: "open", Path: dir, Err: err}
		}
		return &Dir{fd: fd, Path: dir}, nil
	}
	rfd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: root, Err: err}
	}
	defer unix.Close(rfd)
	fd, err := unix.Openat2(rfd, dir, &unix.OpenHow{Flags: uint64(flags), Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS})
	if errors.Is(err, unix.ENOSYS) {
		// Before Linux 5.6: the agent's root is the caller's in its own
		// pod, which is where the chart's users run this.
		fd, err = unix.Openat(rfd, strings.TrimPrefix(dir, "/"), flags, 0)
	}
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: dir + " in " + root, Err: err}
	}
	return &Dir{fd: fd, Path: dir}, nil
}

// Close releases the dir.
func (d *Dir) Close() error { return unix.Close(d.fd) }

// Sub opens a subdirectory by name, not through a symlink.
func (d *Dir) Sub(name string) (*Dir, error) {
	if err := entryName(name); err != nil {
		return nil, err
	}
	fd, err := unix.Openat(d.fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: d.Path + "/" + name, Err: err}
	}
	return &Dir{fd: fd, Path: d.Path + "/" + name}, nil
}

// Names lists at most max entries, sorted; more says there were more.
func (d *Dir) Names(max int) (names []string, more bool, err error) {
	fd, err := unix.Openat(d.fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, false, &os.PathError{Op: "open", Path: d.Path, Err: err}
	}
	f := os.NewFile(uintptr(fd), d.Path)
	defer f.Close()
	names, err = f.Readdirnames(max + 1)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, false, err
	}
	if len(names) > max {
		names, more = names[:max], true
	}
	slices.Sort(names)
	return names, more, nil
}

// Info is what a listing shows of one entry, never following a symlink.
type Info struct {
	Name    string
	Kind    string // file, dir, symlink, fifo, socket, device
	Mode    os.FileMode
	Size    int64
	ModTime time.Time
	Target  string // a symlink's, as it reads
}

// Lstat describes one entry.
func (d *Dir) Lstat(name string) (Info, error) {
	if err := entryName(name); err != nil {
		return Info{}, err
	}
	var st unix.Stat_t
	if err := unix.Fstatat(d.fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return Info{}, &os.PathError{Op: "lstat", Path: d.Path + "/" + name, Err: err}
	}
	in := infoOf(name, &st)
	if in.Kind == "symlink" {
		buf := make([]byte, 4096)
		if n, err := unix.Readlinkat(d.fd, name, buf); err == nil {
			in.Target = string(buf[:n])
		}
	}
	return in, nil
}

func infoOf(name string, st *unix.Stat_t) Info {
	kinds := map[uint32]string{unix.S_IFREG: "file", unix.S_IFDIR: "dir", unix.S_IFLNK: "symlink",
		unix.S_IFIFO: "fifo", unix.S_IFSOCK: "socket", unix.S_IFCHR: "device", unix.S_IFBLK: "device"}
	kind, ok := kinds[st.Mode&unix.S_IFMT]
	if !ok {
		kind = "other"
	}
	return Info{Name: name, Kind: kind, Mode: os.FileMode(st.Mode & 0o7777), Size: st.Size,
		ModTime: time.Unix(st.Mtim.Sec, st.Mtim.Nsec)}
}

// NotRegularError is an entry the bundle does not open.
type NotRegularError struct {
	Name string
	Info Info
}

func (e *NotRegularError) Error() string {
	if e.Info.Kind == "symlink" {
		return fmt.Sprintf("%s: a symlink (to %q), not followed", e.Name, e.Info.Target)
	}
	return fmt.Sprintf("%s: a %s, not opened", e.Name, e.Info.Kind)
}

// File is a regular file's content, cut at the cap.
type File struct {
	Info
	Data      []byte
	Truncated bool
}

// Open opens one regular file of the dir for reading. The entry is pinned
// with O_PATH|O_NOFOLLOW and checked before anything opens it for reading,
// so a name swapped for a FIFO, a device or a symlink between a listing
// and the read is refused too.
func (d *Dir) Open(name string) (*os.File, Info, error) {
	if err := entryName(name); err != nil {
		return nil, Info{}, err
	}
	pfd, err := unix.Openat(d.fd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, Info{}, &os.PathError{Op: "open", Path: d.Path + "/" + name, Err: err}
	}
	defer unix.Close(pfd)
	var st unix.Stat_t
	if err := unix.Fstat(pfd, &st); err != nil {
		return nil, Info{}, &os.PathError{Op: "stat", Path: d.Path + "/" + name, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		in, _ := d.Lstat(name)
		in.Kind = infoOf(name, &st).Kind
		return nil, Info{}, &NotRegularError{Name: name, Info: in}
	}
	// Reopen the pinned inode itself; O_NONBLOCK in case the kernel ever
	// hands back something that could block.
	fd, err := unix.Open("/proc/self/fd/"+strconv.Itoa(pfd), unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, Info{}, &os.PathError{Op: "open", Path: d.Path + "/" + name, Err: err}
	}
	return os.NewFile(uintptr(fd), d.Path+"/"+name), infoOf(name, &st), nil
}

// Read reads one regular file of the dir (Open's rules): its first max
// bytes, or with tail its last.
func (d *Dir) Read(name string, max int64, tail bool) (File, error) {
	f, in, err := d.Open(name)
	if err != nil {
		return File{}, err
	}
	defer f.Close()
	out := File{Info: in}
	var r io.Reader = f
	if tail && in.Size > max {
		r = io.NewSectionReader(f, in.Size-max, max)
		out.Truncated = true
	}
	out.Data, err = io.ReadAll(io.LimitReader(r, max+1))
	if err != nil {
		return File{}, fmt.Errorf("read %s/%s: %w", d.Path, name, err)
	}
	if int64(len(out.Data)) > max {
		out.Data, out.Truncated = out.Data[:max], true
	}
	return out, nil
}

// entryName refuses a name that is not one entry of the dir.
func entryName(name string) error {
	if name == "" || name == "." || name == ".." || strings.Contains(name, "/") {
		return fmt.Errorf("%q is not a directory entry", name)
	}
	return nil
}
