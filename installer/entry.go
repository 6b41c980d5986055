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

// istioCNIType is the "type" of istio-cni's chained entry. Left in the
// primary after a migration to sluice it would capture pods a second time
// (or fail their ADD once istio-cni's agent is gone).
const istioCNIType = "istio-cni"

// listWithoutLeftovers is the primary as a conflist, without a leftover
// istio-cni entry when the operator asked for its removal; otherwise such
// an entry is kept and reported.
func (in *Installer) listWithoutLeftovers(p primaryConf) ([]byte, error) {
	list := p.data
	if !p.conflist {
		var err error
		if list, err = conflist.FromConf(p.data); err != nil {
			return nil, fmt.Errorf("list single-plugin config %s: %w", p.path, err)
		}
	}
	types, err := conflist.PluginTypes(list)
	if err != nil || !slices.Contains(types, istioCNIType) {
		return list, err
	}
	if !in.cfg.RemoveIstioCNIEntry {
		in.warnOnce("istio-cni:"+in.show(p.path), "the primary CNI config still holds an istio-cni entry: pods are captured by both, or fail ADD once istio-cni's agent is gone; remove it, or start the agent with --remove-istio-cni-entry",
			"path", in.show(p.path), "plugins", types)
		return list, nil
	}
	out, err := conflist.RemovePlugins(list, istioCNIType)
	if err != nil {
		return nil, fmt.Errorf("remove the istio-cni entry from %s: %w", p.path, err)
	}
	in.log.Info("removing the leftover istio-cni entry", "path", in.show(p.path), "plugins", types)
	return out, nil
}

// dropEntry takes the entry an earlier version inserted out of a primary
// conflist, keeping its mode and every other byte. A missing file or one
// without our entry is fine.
func (in *Installer) dropEntry(path string) error {
	return retryChanged(func() error {
		cur, err := readConf(path)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read %s to remove the sluice entry: %w", path, err)
		}
		out, err := conflist.RemoveEntry(cur.data)
		if err != nil {
			return fmt.Errorf("remove sluice entry from %s: %w", path, err)
		}
		if bytes.Equal(out, cur.data) {
			return nil
		}
		in.countWrite()
		if err := rewrite(cur, out); err != nil {
			return fmt.Errorf("write %s without the sluice entry: %w", path, err)
		}
		in.log.Info("removed the sluice entry", "path", in.show(path))
		return nil
	})
}

// ownedConfs lists our chained conflists in the conf dir (not the
// non-chained OwnConfName, whose name shares the suffix). Only a file that
// holds a sluice entry counts as ours, whatever its name.
func (in *Installer) ownedConfs() []string {
	entries, err := os.ReadDir(in.conf)
	if err != nil {
		return nil
	}
	var owned []string
	for _, e := range entries {
		name := e.Name()
		if name == OwnConfName || name == legacyOwnConfName || !strings.HasSuffix(name, chainedSuffix) {
			continue
		}
		if path := filepath.Join(in.conf, name); isOwned(path) {
			owned = append(owned, path)
		}
	}
	return owned
}

// removeOwnedConfs removes each conflist of ours for which drop holds.
func (in *Installer) removeOwnedConfs(drop func(path string) bool) {
	for _, path := range in.ownedConfs() {
		if !drop(path) {
			continue
		}
		in.countWrite()
		if err := removeFile(path); err != nil {
			in.log.Warn("could not remove a sluice conflist no longer in use", "path", in.show(path), "err", err)
			continue
		}
		in.log.Info("removed a sluice conflist no longer in use", "path", in.show(path))
	}
}

// isOwned reports whether path is a config of ours: it holds our entry.
func isOwned(path string) bool {
	cur, err := readConf(path)
	return err == nil && hasEntry(cur.data)
}

// hasEntry reports whether a conflist holds a sluice entry.
func hasEntry(data []byte) bool {
	types, err := conflist.PluginTypes(data)
	return err == nil && slices.Contains(types, conflist.PluginType)
}
