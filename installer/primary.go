package installer

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/containernetworking/cni/libcni"
	"github.com/sluicemesh/sluice/installer/conflist"
)

// primaryConf is the config file our entry is chained into, as read.
type primaryConf struct {
	path     string
	data     []byte
	mode     fs.FileMode
	conflist bool // false: a single-plugin .conf/.json to convert first
}

// conflistPath is where the entry lives: the file itself, or for a
// single-plugin conf the .conflist it is converted to.
func (p primaryConf) conflistPath() string {
	if p.conflist {
		return p.path
	}
	return strings.TrimSuffix(p.path, filepath.Ext(p.path)) + ".conflist"
}

// findPrimary reads the primary config: ConfName if set (or the .conflist
// it was converted to), else the lexically first valid config that is not
// OwnConfName. Invalid files are never chosen and never touched.
func (in *Installer) findPrimary() (primaryConf, error) {
	dir := in.cfg.ConfDir
	if in.cfg.ConfName != "" {
		return in.namedPrimary(filepath.Join(dir, in.cfg.ConfName))
	}
	files, err := libcni.ConfFiles(dir, []string{".conf", ".conflist", ".json"})
	if err != nil {
		return primaryConf{}, fmt.Errorf("list CNI configs: %w", err)
	}
	sort.Strings(files)
	var skipped []string
	for _, f := range files {
		if filepath.Base(f) == OwnConfName {
			continue
		}
		p, err := readPrimary(f)
		if errors.Is(err, fs.ErrNotExist) {
			continue // removed between listing and reading
		}
		if err != nil {
			skipped = append(skipped, err.Error())
			continue
		}
		if len(skipped) > 0 {
			// containerd stops at the first config that does not parse,
			// CRI-O skips it; either way the operator should know.
			in.warnOnce(strings.Join(skipped, "|"), "skipped invalid CNI configs that sort before the primary; they are left untouched",
				"primary", p.path, "skipped", skipped)
		}
		return p, nil
	}
	if len(skipped) > 0 {
		return primaryConf{}, fmt.Errorf("no valid CNI config in %s to chain into, waiting; left untouched: %s", dir, strings.Join(skipped, "; "))
	}
	return primaryConf{}, fmt.Errorf("no CNI config in %s to chain into yet, waiting for one", dir)
}

// namedPrimary reads an operator-named primary. After a .conf was converted
// only its .conflist remains, so that is the primary from then on.
func (in *Installer) namedPrimary(path string) (primaryConf, error) {
	p, err := readPrimary(path)
	if errors.Is(err, fs.ErrNotExist) && !p.conflist {
		p, err = readPrimary(p.conflistPath())
	}
	if errors.Is(err, fs.ErrNotExist) {
		return p, fmt.Errorf("primary CNI config %s does not exist yet, waiting for it", path)
	}
	return p, err
}

// readPrimary reads path and checks it as the runtime would, plus the
// network name a .conf needs to become a .conflist.
func readPrimary(path string) (primaryConf, error) {
	p := primaryConf{path: path, conflist: filepath.Ext(path) == ".conflist"}
	fi, err := os.Stat(path)
	if err != nil {
		return p, err
	}
	if !fi.Mode().IsRegular() {
		return p, fmt.Errorf("%s is not a regular file", path)
	}
	p.mode = fi.Mode().Perm()
	if p.data, err = os.ReadFile(path); err != nil {
		return p, err
	}
	if p.conflist {
		err = conflist.Validate(p.data)
	} else {
		_, err = conflist.FromConf(p.data)
	}
	if err != nil {
		return p, fmt.Errorf("%s is not a valid CNI config: %w", path, err)
	}
	return p, nil
}
