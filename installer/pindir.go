package installer

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// The conf dir and the bin dirs are pinned: each is held open, and every
// path the installer reads, writes or removes in it is built on
// /proc/self/fd/<fd>, which names that very directory whatever its path
// names meanwhile. A directory swapped for a symbolic link (to another
// CNI's conf dir, say) is therefore never written through: the path is
// checked at every sync, and while it resolves through a link the
// installer writes nothing there and is not ready. A real directory put at
// the path (a recreated net.d) is pinned in place of the old one.

// pinnedDir is one directory the installer writes in.
type pinnedDir struct {
	real     string // the configured path with its links resolved once
	fd       int    // O_PATH descriptor, open for the installer's life
	dev, ino uint64
}

// at is the path the installer works through: the directory itself.
func (d *pinnedDir) at() string { return "/proc/self/fd/" + strconv.Itoa(d.fd) }

// pin returns the path to work in for the configured directory dir,
// creating it when missing. The first call resolves dir's symbolic links
// (a node may keep net.d elsewhere) and pins what it names; later calls
// refuse any link on the way and re-pin only a real directory that took
// its place. The caller holds in.mu.
func (in *Installer) pin(dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("create directory %s: %w", dir, err)
	}
	d := in.pins[dir]
	real := ""
	if d != nil {
		real = d.real
	} else {
		var err error
		if real, err = filepath.EvalSymlinks(dir); err != nil {
			return "", fmt.Errorf("resolve directory %s: %w", dir, err)
		}
	}
	fd, err := openDirNoLinks(real)
	if err != nil {
		return "", fmt.Errorf("%s is not the directory the installer pinned (%s), or reaches it through a symbolic link now; writing nothing there until it is a directory again: %w", dir, real, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return "", fmt.Errorf("stat directory %s: %w", dir, err)
	}
	switch {
	case d == nil:
		in.pins[dir] = &pinnedDir{real: real, fd: fd, dev: st.Dev, ino: st.Ino}
	case d.dev == st.Dev && d.ino == st.Ino:
		unix.Close(fd)
	default:
		in.log.Info("directory replaced by another; working in the new one", "dir", dir)
		old := d.at()
		unix.Close(d.fd)
		d.fd, d.dev, d.ino = fd, st.Dev, st.Ino
		in.rekey(old, d.at())
	}
	return in.pins[dir].at(), nil
}

// openDirNoLinks opens path, a directory, following no symbolic link on
// the way (openat2 RESOLVE_NO_SYMLINKS); before Linux 5.6, only its last
// component is checked.
func openDirNoLinks(path string) (int, error) {
	fd, err := unix.Openat2(unix.AT_FDCWD, path, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_NO_SYMLINKS,
	})
	if errors.Is(err, unix.ENOSYS) {
		fd, err = unix.Open(path, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	}
	return fd, err
}

// rekey moves what the installer remembers by path from the old pinned
// directory to the new one: a remembered path never outlives its fd.
func (in *Installer) rekey(old, now string) {
	move := func(p string) string {
		if rest, ok := strings.CutPrefix(p, old+"/"); ok {
			return now + "/" + rest
		}
		return p
	}
	in.owned = move(in.owned)
	in.placed = rekeyed(in.placed, move)
	in.verified = rekeyed(in.verified, move)
}

func rekeyed[V any](m map[string]V, move func(string) string) map[string]V {
	out := make(map[string]V, len(m))
	for k, v := range maps.All(m) {
		out[move(k)] = v
	}
	return out
}

// show turns a path the installer works through back into the configured
// one, for logs, readiness and metrics.
func (in *Installer) show(s string) string {
	return fdPath.ReplaceAllStringFunc(s, func(m string) string {
		for dir, d := range in.pins {
			if d.at() == m {
				return dir
			}
		}
		return m
	})
}

var fdPath = regexp.MustCompile(`/proc/self/fd/[0-9]+`)
