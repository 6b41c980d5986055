package installer

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/sluicemesh/sluice/installer/conflist"
)

const binaryPerm fs.FileMode = 0o755

// syncBinary puts PluginBinary into dir as "sluice" unless a file with the
// same content and mode is already there.
func (in *Installer) syncBinary(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create plugin binary directory: %w", err)
	}
	target := filepath.Join(dir, conflist.PluginType)
	what, err := in.checkBinary(target)
	if err != nil {
		return err
	}
	if what == "" {
		in.placed[target] = true
		return nil
	}
	in.repairing(target, what)
	if err := replaceFile(target, binaryPerm, in.copyBinary, nil); err != nil {
		return fmt.Errorf("install plugin binary: %w", err)
	}
	fi, err := os.Stat(target)
	if err != nil {
		return fmt.Errorf("check installed plugin binary: %w", err)
	}
	in.verified[target] = stampOf(fi)
	in.placed[target] = true
	return nil
}

// stamp is what identifies a file's content without reading it: any write
// or replacement changes at least one field. The change time is the one a
// writer cannot set back (utimes sets mtime, and moves ctime to now).
type stamp struct {
	dev, ino     uint64
	size         int64
	mtime, ctime syscall.Timespec
}

func stampOf(fi os.FileInfo) stamp {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return stamp{} // never equal to a real one: the file is hashed
	}
	return stamp{dev: st.Dev, ino: st.Ino, size: st.Size, mtime: st.Mtim, ctime: st.Ctim}
}

// checkBinary says what is wrong with target, or "" when it is in place.
// Hashing a multi-megabyte binary on every event would be wasteful, so a
// file whose stamp (inode, size, mtime and ctime) matches the last
// verified one is trusted; any replacement or in-place write changes at
// least the ctime, whatever is done to the mtime after.
func (in *Installer) checkBinary(target string) (string, error) {
	fi, err := os.Stat(target)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "binary missing", nil
	case err != nil:
		return "", fmt.Errorf("check plugin binary: %w", err)
	case !fi.Mode().IsRegular():
		return fmt.Sprintf("not a regular file (%s)", fi.Mode().Type()), nil
	case fi.Mode().Perm() != binaryPerm:
		return fmt.Sprintf("mode changed to %s", fi.Mode().Perm()), nil
	}
	if prev, ok := in.verified[target]; ok && prev != (stamp{}) && prev == stampOf(fi) {
		return "", nil
	}
	sum, err := hashFile(target)
	if err != nil {
		return "", fmt.Errorf("check plugin binary: %w", err)
	}
	if sum != in.srcHash {
		delete(in.verified, target)
		return fmt.Sprintf("content changed (sha256 %x, want %x)", sum[:6], in.srcHash[:6]), nil
	}
	in.verified[target] = stampOf(fi)
	return "", nil
}

// copyBinary streams PluginBinary into w and fails if what was copied is not
// what New hashed, so a half-replaced source is never published.
func (in *Installer) copyBinary(w io.Writer) error {
	src, err := os.Open(in.cfg.PluginBinary)
	if err != nil {
		return fmt.Errorf("open plugin binary: %w", err)
	}
	defer src.Close()
	h := sha256.New()
	if _, err := io.Copy(io.MultiWriter(w, h), src); err != nil {
		return fmt.Errorf("copy plugin binary %s: %w", in.cfg.PluginBinary, err)
	}
	if !bytes.Equal(h.Sum(nil), in.srcHash[:]) {
		return fmt.Errorf("plugin binary %s changed since the agent started", in.cfg.PluginBinary)
	}
	return nil
}
