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

// dropEntry takes our entry out of path: a conflist of ours is removed, any
// other keeps its mode and every other byte. A missing file or one without
// our entry is fine.
func (in *Installer) dropEntry(path string) error {
	if ours(filepath.Base(path)) {
		in.removeChainedConfs(func(p string) bool { return p == path })
		return nil
	}
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

// removeChainedConfs removes each conflist of ours chained from a
// single-plugin config for which drop holds. Only a file that holds a
// sluice entry counts as ours, whatever its name.
func (in *Installer) removeChainedConfs(drop func(path string) bool) {
	entries, err := os.ReadDir(in.conf)
	if err != nil {
		return
	}
	for _, e := range entries {
		path := filepath.Join(in.conf, e.Name())
		if !strings.HasSuffix(e.Name(), chainedSuffix) || !drop(path) {
			continue
		}
		if cur, err := readConf(path); err != nil || !hasEntry(cur.data) {
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

// chainedSourceExists reports whether the single-plugin config a conflist
// of ours was chained from is still there.
func chainedSourceExists(path string) bool {
	stem := strings.TrimSuffix(path, chainedSuffix)
	return fileExists(stem+".conf") || fileExists(stem+".json")
}

// hasEntry reports whether a conflist holds a sluice entry.
func hasEntry(data []byte) bool {
	types, err := conflist.PluginTypes(data)
	return err == nil && slices.Contains(types, conflist.PluginType)
}
