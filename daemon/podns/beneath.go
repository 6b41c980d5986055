package podns

import (
	"errors"
	"strings"

	"golang.org/x/sys/unix"
)

// openBeneath opens rel under the directory rfd with O_PATH, never leaving
// it: openat2 with RESOLVE_BENEATH|RESOLVE_NO_MAGICLINKS, where a symlink
// may point only within the root, and only relatively. On kernels without
// openat2 (before 5.6) it walks component by component and refuses any
// symlink, which is as safe and stricter.
func openBeneath(rfd int, rel string) (int, error) {
	how := &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS,
	}
	for range 8 {
		fd, err := unix.Openat2(rfd, rel, how)
		switch {
		case err == nil:
			return fd, nil
		case errors.Is(err, unix.EAGAIN):
			continue // a concurrent rename the kernel could not rule out: retry
		case errors.Is(err, unix.ENOSYS):
			return walkBeneath(rfd, rel)
		}
		return -1, err
	}
	return -1, errors.New("openat2 kept racing with renames under the root")
}

// walkBeneath is openBeneath without openat2: one openat per component,
// none followed if it is a symlink.
func walkBeneath(rfd int, rel string) (int, error) {
	dir, err := unix.Dup(rfd)
	if err != nil {
		return -1, err
	}
	for _, name := range strings.Split(rel, "/") {
		if name == "" || name == "." {
			continue
		}
		if name == ".." {
			unix.Close(dir)
			return -1, unix.EXDEV
		}
		fd, err := unix.Openat(dir, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		unix.Close(dir)
		if err != nil {
			return -1, err
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			unix.Close(fd)
			return -1, err
		}
		if st.Mode&unix.S_IFMT == unix.S_IFLNK {
			unix.Close(fd)
			return -1, unix.ELOOP
		}
		dir = fd
	}
	return dir, nil
}
