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
	"github.com/sluicemesh/sluice/internal/atomicfile"
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

// syncChained keeps our conflist, "<stem>-sluice.conflist": the primary's
// network byte for byte with our entry last, sorting just before the
// primary, so the runtime's first config always holds sluice. The primary
// is never edited, except to take out what is not its CNI's: the entry an
// earlier version inserted, and istio-cni's when asked.
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
	return retryChanged(in.chainOnce)
}

// chainOnce writes ours for the current primary, and only then removes
// what it replaces, so there is never a moment with neither: our conflists
// for other primaries, and our entry in the primary itself.
//
// With no primary at all ours stays, a copy of the last one: a CNI that
// removed its file may write it again before the agent is back (a reboot),
// and until then ours fails every ADD closed (no agent, no pod) where no
// file of ours would start the new file's pods uncaptured. Not ready.
func (in *Installer) chainOnce() error {
	p, err := in.findPrimary()
	if errors.Is(err, errNoPrimary) {
		if kept := in.ownedConfs(); len(kept) > 0 {
			return fmt.Errorf("%w; keeping %s so that pods fail closed until it is back", err, in.show(strings.Join(kept, ", ")))
		}
	}
	if err != nil {
		return err
	}
	target := p.target()
	base, err := in.primaryWithoutExtras(p)
	if err != nil {
		return err
	}
	want, err := conflist.InsertEntry(base, in.entry)
	if err != nil {
		return fmt.Errorf("build %s from %s: %w", target, p.path, err)
	}
	if in.owned != "" && in.owned != target {
		in.log.Info("primary CNI config changed, following it", "from", in.show(in.owned), "to", in.show(target))
	}
	if err := in.placeOwned(p, target, want); err != nil {
		return err
	}
	in.owned = target
	in.placed[target] = true
	in.removeOwnedConfs(func(path string) bool { return path != target })
	return in.cleanPrimary(p, base)
}

// primaryWithoutExtras is the primary as a conflist without our entry (an
// earlier version inserted it there) and, when asked, without istio-cni's.
func (in *Installer) primaryWithoutExtras(p primaryConf) ([]byte, error) {
	list, err := in.listWithoutLeftovers(p)
	if err != nil {
		return nil, err
	}
	out, err := conflist.RemoveEntry(list)
	if errors.Is(err, conflist.ErrOnlyPlugin) {
		// A list of sluice alone is not ours to empty; InsertEntry keeps it.
		return list, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s without the sluice entry: %w", p.path, err)
	}
	return out, nil
}

// cleanPrimary takes out of a primary conflist what primaryWithoutExtras
// left out, once ours is in place; the rename is dropped (errChanged) if
// the primary's CNI wrote the file since it was read.
func (in *Installer) cleanPrimary(p primaryConf, base []byte) error {
	if !p.conflist || bytes.Equal(base, p.data) || hasEntry(base) {
		return nil
	}
	in.countWrite()
	in.log.Info("taking what is not its CNI's out of the primary config, now that "+filepath.Base(p.target())+" holds the chain",
		"path", in.show(p.path), "change", describeChange(p.data))
	if err := rewrite(p.snapshot, base); err != nil {
		return fmt.Errorf("write %s without the sluice entry: %w", p.path, err)
	}
	return nil
}

// placeOwned keeps our conflist at target holding want, built from p. It
// is renamed into place only while p is still what want was built from
// (errChanged otherwise, and the next try follows the new bytes). Whatever
// is at that name is replaced: it sorts just before the primary, so a file
// there without our entry would start every pod uncaptured.
func (in *Installer) placeOwned(p primaryConf, target string, want []byte) error {
	cur, err := readConf(target)
	var unchanged func() error
	switch {
	case errors.Is(err, fs.ErrNotExist):
		in.repairing(target, fmt.Sprintf("chaining %s", filepath.Base(p.path)))
		unchanged = p.unchanged
	case err != nil:
		// A link, a FIFO, a huge file: the name is ours.
		in.repairing(target, err.Error())
		unchanged = p.unchanged
	case bytes.Equal(cur.data, want):
		return nil
	case !hasEntry(cur.data):
		in.log.Warn("replacing a file at the sluice conflist's name that has no sluice entry: sorting first, it would start pods uncaptured", "path", in.show(target))
		in.repairing(target, describeChange(cur.data))
		unchanged = func() error { return errors.Join(p.unchanged(), cur.unchanged()) }
	case in.entryIntact(cur.data):
		// Ours is intact and the primary changed: following it is no
		// repair, and ours keeps sluice in the chain meanwhile.
		in.countWrite()
		in.log.Info("following a rewrite of the primary CNI config", "primary", in.show(p.path), "path", in.show(target))
		unchanged = func() error { return errors.Join(p.unchanged(), cur.unchanged()) }
	default:
		in.repairing(target, describeChange(cur.data))
		unchanged = func() error { return errors.Join(p.unchanged(), cur.unchanged()) }
	}
	if err := replaceFile(target, p.info.Mode().Perm(), atomicfile.Bytes(want), unchanged); err != nil {
		return fmt.Errorf("write CNI config: %w", err)
	}
	return nil
}

// entryIntact reports whether our conflist cur holds our entry last, as
// this agent would insert it, so only the primary's part can differ.
func (in *Installer) entryIntact(cur []byte) bool {
	base, err := conflist.RemoveEntry(cur)
	if err != nil {
		return false
	}
	again, err := conflist.InsertEntry(base, in.entry)
	return err == nil && bytes.Equal(again, cur)
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
	// A chained run's conflist sorts first: left in place, every pod would
	// still run sluice in the default network too. Ours goes once own is in.
	defer in.removeOwnedConfs(func(string) bool { return in.placed[path] })
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
