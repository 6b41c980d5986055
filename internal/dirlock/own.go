package dirlock

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// Own makes sure dir is the process's own, fit to hold its socket or its
// state. A missing dir is created with mode (the only case its mode is
// set). An existing one must be a real directory (not a symlink) owned by
// this process's euid and writable by no one else; otherwise it is refused
// and left as it is: a shared directory (a 1777 /tmp, another daemon's) is
// never tightened under its owners, and a file in it would be one anyone
// could replace or plant.
func Own(dir string, mode os.FileMode) error {
	fi, err := os.Lstat(dir)
	if errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
			return fmt.Errorf("create the parent of %s: %w", dir, err)
		}
		if err := os.Mkdir(dir, mode); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("create %s: %w", dir, err)
		}
		if err := os.Chmod(dir, mode); err != nil { // the umask may have narrowed or widened it
			return fmt.Errorf("set mode of %s: %w", dir, err)
		}
		fi, err = os.Lstat(dir)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", dir, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory (%s); refusing it", dir, fi.Mode().Type())
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("%s: no owner information", dir)
	}
	if euid := os.Geteuid(); int(st.Uid) != euid {
		return fmt.Errorf("%s is owned by uid %d, not this agent's (%d); refusing it (use a directory of the agent's own)", dir, st.Uid, euid)
	}
	if fi.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("%s is writable by group or others (%v); refusing it (use a directory of the agent's own)", dir, fi.Mode().Perm())
	}
	return nil
}
