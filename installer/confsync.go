package installer

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/containernetworking/cni/libcni"
	"github.com/sluicemesh/sluice/installer/conflist"
)

const ownConfPerm fs.FileMode = 0o644

func (in *Installer) syncConf() error {
	if err := os.MkdirAll(in.cfg.ConfDir, 0o755); err != nil {
		return fmt.Errorf("create CNI config directory: %w", err)
	}
	if in.cfg.Chained {
		return in.syncChained()
	}
	return in.syncOwn()
}

// syncChained keeps our entry last in the primary conflist. A deleted
// primary is not recreated: its CNI may have removed it on purpose, and a
// config for a CNI that is gone would break every new pod. The installer
// waits, not ready, until a primary appears.
func (in *Installer) syncChained() error {
	// A file left by an earlier non-chained run sorts first and would
	// hand every pod to sluice alone.
	if own := filepath.Join(in.cfg.ConfDir, OwnConfName); fileExists(own) {
		in.log.Warn("removing the non-chained config of an earlier run", "path", own)
		in.countWrite()
		if err := removeFile(own); err != nil {
			return err
		}
	}
	p, err := in.findPrimary()
	if err != nil {
		return err
	}
	target := p.conflistPath()
	if in.primary != "" && in.primary != target {
		in.log.Info("primary CNI config changed, moving the sluice entry", "from", in.primary, "to", target)
		if err := in.dropEntry(in.primary); err != nil {
			in.log.Warn("could not remove the sluice entry from the former primary", "path", in.primary, "err", err)
		}
		in.primary = ""
	}
	list := p.data
	if !p.conflist {
		if list, err = in.convertible(p); err != nil {
			return err
		}
	}
	want, err := conflist.InsertEntry(list, in.entry)
	if err != nil {
		return fmt.Errorf("insert sluice entry into %s: %w", p.path, err)
	}
	if p.conflist && bytes.Equal(want, p.data) {
		in.placed[target] = true
		in.primary = target
		return nil
	}
	in.repairing(target, describeChange(p))
	if err := writeFile(target, want, p.mode); err != nil {
		return fmt.Errorf("write CNI config: %w", err)
	}
	in.primary = target
	in.placed[target] = true
	// The .conflist exists before the .conf goes, so the runtime always
	// has one of them; while both exist the .conf sorts first.
	if !p.conflist {
		in.countWrite()
		if err := removeFile(p.path); err != nil {
			return fmt.Errorf("remove converted single-plugin config: %w", err)
		}
	}
	return nil
}

// convertible turns a single-plugin conf into a conflist, refusing to
// overwrite a .conflist of the same stem that belongs to another network;
// one of the same network is our earlier conversion, rewritten by its CNI.
func (in *Installer) convertible(p primaryConf) ([]byte, error) {
	list, err := conflist.FromConf(p.data)
	if err != nil {
		return nil, fmt.Errorf("convert %s to a conflist: %w", p.path, err)
	}
	existing, err := os.ReadFile(p.conflistPath())
	if errors.Is(err, fs.ErrNotExist) {
		return list, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read conversion target: %w", err)
	}
	theirs, err := libcni.ConfListFromBytes(existing)
	if err != nil {
		return nil, fmt.Errorf("converting %s would overwrite %s, which is not a valid conflist: %w", p.path, p.conflistPath(), err)
	}
	ours, _ := libcni.ConfListFromBytes(list)
	if theirs.Name != ours.Name {
		return nil, fmt.Errorf("converting %s would overwrite %s of network %q", p.path, p.conflistPath(), theirs.Name)
	}
	return list, nil
}

// describeChange says what happened to a primary that needs a write, in
// words an operator can match to the CNI that did it.
func describeChange(p primaryConf) string {
	if !p.conflist {
		return fmt.Sprintf("single-plugin config %s written, converting it", filepath.Base(p.path))
	}
	types, _ := conflist.PluginTypes(p.data)
	switch {
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
	path := filepath.Join(in.cfg.ConfDir, OwnConfName)
	in.warnIfShadowed()
	cur, err := os.ReadFile(path)
	switch {
	case err == nil && bytes.Equal(cur, in.own):
		in.placed[path] = true
		return nil
	case errors.Is(err, fs.ErrNotExist):
		in.repairing(path, "file missing")
	case err != nil:
		return fmt.Errorf("read own CNI config: %w", err)
	default:
		in.repairing(path, "content changed")
	}
	if err := writeFile(path, in.own, ownConfPerm); err != nil {
		return fmt.Errorf("write own CNI config: %w", err)
	}
	in.placed[path] = true
	return nil
}

// warnIfShadowed tells the operator when a config sorts before ours: the
// runtime then uses that one and never calls sluice.
func (in *Installer) warnIfShadowed() {
	files, err := libcni.ConfFiles(in.cfg.ConfDir, []string{".conf", ".conflist", ".json"})
	if err != nil || len(files) == 0 {
		return
	}
	sort.Strings(files)
	if first := filepath.Base(files[0]); first < OwnConfName {
		in.warnOnce("shadowed:"+first, "a CNI config sorts before ours; runtimes that use the first config will not call sluice",
			"config", files[0], "ours", OwnConfName)
	}
}

// dropEntry removes our entry from the conflist at path, keeping its mode
// and every other byte. A missing file or one without our entry is fine.
func (in *Installer) dropEntry(path string) error {
	fi, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("check %s for the sluice entry: %w", path, err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read %s to remove the sluice entry: %w", path, err)
	}
	out, err := conflist.RemoveEntry(data)
	if err != nil {
		return fmt.Errorf("remove sluice entry from %s: %w", path, err)
	}
	if bytes.Equal(out, data) {
		return nil
	}
	in.countWrite()
	if err := writeFile(path, out, fi.Mode().Perm()); err != nil {
		return fmt.Errorf("write %s without the sluice entry: %w", path, err)
	}
	in.log.Info("removed the sluice entry", "path", path)
	return nil
}

func fileExists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}
