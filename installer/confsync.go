package installer

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/sluicemesh/sluice/installer/conflist"
)

const ownConfPerm fs.FileMode = 0o644

// editAttempts bounds the re-reads when the primary keeps changing under an
// edit; after that the next event or resync tries again.
const editAttempts = 5

func (in *Installer) syncConf() error {
	if in.cfg.Chained {
		return in.syncChained()
	}
	return in.syncOwn()
}

// syncChained keeps our entry last in the primary conflist (or in our own
// conflist chained from a single-plugin primary). A deleted primary is not
// recreated: its CNI may have removed it on purpose, and a config for a CNI
// that is gone would break every new pod. The installer waits, not ready,
// until a primary appears.
func (in *Installer) syncChained() error {
	// A file left by a non-chained run would hand every pod to sluice alone
	// (00-) or sit unused (YYY-); both are ours.
	for _, name := range []string{OwnConfName, legacyOwnConfName} {
		if own := filepath.Join(in.conf, name); fileExists(own) {
			in.log.Warn("removing the non-chained config of an earlier run", "path", in.show(own))
			in.countWrite()
			if err := removeFile(own); err != nil {
				return err
			}
		}
	}
	// Our conflist for a .conf that is gone must go too: it would keep a
	// removed CNI's config in use.
	in.removeChainedConfs(func(path string) bool { return !chainedSourceExists(path) })
	return retryChanged(in.chainOnce)
}

func (in *Installer) chainOnce() error {
	p, err := in.findPrimary()
	if err != nil {
		return err
	}
	target := p.target()
	if in.primary != "" && in.primary != target {
		in.log.Info("primary CNI config changed, moving the sluice entry", "from", in.show(in.primary), "to", in.show(target))
		if err := in.dropEntry(in.primary); err != nil {
			in.log.Warn("could not remove the sluice entry from the former primary", "path", in.show(in.primary), "err", err)
		}
		in.primary = ""
	}
	in.removeChainedConfs(func(path string) bool { return path != target })
	list, err := in.listWithoutLeftovers(p)
	if err != nil {
		return err
	}
	want, err := conflist.InsertEntry(list, in.entry)
	if err != nil {
		return fmt.Errorf("insert sluice entry into %s: %w", p.path, err)
	}
	if p.conflist {
		err = in.placeInPrimary(p, want)
	} else {
		err = in.placeChainedConf(p, target, want)
	}
	if err != nil {
		return err
	}
	in.primary = target
	in.placed[target] = true
	return nil
}

// placeInPrimary rewrites the primary conflist with our entry unless it
// already holds exactly that; the rename is dropped (errChanged) if the
// primary's CNI wrote the file since it was read.
func (in *Installer) placeInPrimary(p primaryConf, want []byte) error {
	if bytes.Equal(want, p.data) {
		return nil
	}
	in.repairing(p.path, describeChange(p.data))
	if err := rewrite(p.snapshot, want); err != nil {
		return fmt.Errorf("write CNI config: %w", err)
	}
	return nil
}

// placeChainedConf keeps our conflist for a single-plugin primary: the
// primary's plugin followed by ours. A file at that name that is not ours
// is never overwritten.
func (in *Installer) placeChainedConf(p primaryConf, target string, want []byte) error {
	cur, err := readConf(target)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		in.repairing(target, fmt.Sprintf("chaining single-plugin config %s", filepath.Base(p.path)))
		if err := writeFile(target, want, p.info.Mode().Perm()); err != nil {
			return fmt.Errorf("write CNI config: %w", err)
		}
		return nil
	case err != nil:
		return fmt.Errorf("cannot chain %s through %s: %w", p.path, target, err)
	case bytes.Equal(cur.data, want):
		return nil
	case !hasEntry(cur.data):
		return fmt.Errorf("cannot chain %s: %s exists and is not sluice's (it has no sluice entry); refusing to overwrite it", p.path, target)
	}
	in.repairing(target, fmt.Sprintf("single-plugin config %s changed, or the sluice conflist was edited", filepath.Base(p.path)))
	if err := rewrite(cur, want); err != nil {
		return fmt.Errorf("write CNI config: %w", err)
	}
	return nil
}

// describeChange says what happened to a primary that needs a write, in
// words an operator can match to the CNI that did it.
func describeChange(data []byte) string {
	types, _ := conflist.PluginTypes(data)
	switch {
	case slices.Contains(types, istioCNIType):
		return fmt.Sprintf("removing a leftover istio-cni entry (plugins: %s)", strings.Join(types, ", "))
	case !slices.Contains(types, conflist.PluginType):
		return fmt.Sprintf("rewritten without the sluice entry (plugins: %s)", strings.Join(types, ", "))
	case types[len(types)-1] != conflist.PluginType:
		return fmt.Sprintf("sluice entry no longer last (plugins: %s)", strings.Join(types, ", "))
	default:
		return "sluice entry changed"
	}
}

// syncOwn keeps OwnConfName exactly as this agent would write it.
func (in *Installer) syncOwn() error {
	path := filepath.Join(in.conf, OwnConfName)
	// Earlier versions wrote 00-sluice.conflist, which sorts first: it would
	// hand every pod to sluice alone instead of to the primary CNI.
	if legacy := filepath.Join(in.conf, legacyOwnConfName); fileExists(legacy) {
		in.log.Warn("removing the non-chained config of an earlier version, which sorts first", "path", in.show(legacy))
		in.countWrite()
		if err := removeFile(legacy); err != nil {
			return err
		}
	}
	cur, err := readConf(path)
	switch {
	case err == nil && bytes.Equal(cur.data, in.own):
		in.placed[path] = true
		return nil
	case errors.Is(err, fs.ErrNotExist):
		in.repairing(path, "file missing")
	case err != nil:
		// The name is ours, whatever was put there: a link, a FIFO, a huge file.
		in.repairing(path, err.Error())
	default:
		in.repairing(path, "content changed")
	}
	if err := writeFile(path, in.own, ownConfPerm); err != nil {
		return fmt.Errorf("write own CNI config: %w", err)
	}
	in.placed[path] = true
	return nil
}

// retryChanged runs edit again while another writer changed the file under
// it, so the other write is kept and our entry still goes in.
func retryChanged(edit func() error) error {
	var err error
	for range editAttempts {
		if err = edit(); !errors.Is(err, errChanged) {
			return err
		}
	}
	return fmt.Errorf("gave up after %d attempts, retrying on the next change: %w", editAttempts, err)
}

func fileExists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}
