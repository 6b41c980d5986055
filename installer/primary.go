package installer

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"sort"
	"strings"

	"github.com/containernetworking/cni/libcni"
	"github.com/sluicemesh/sluice/installer/conflist"
)

// chainedSuffix names the conflist the installer owns in chained mode: for
// a primary "<stem>.conflist" (or .conf, .json) it is
// "<stem>-sluice.conflist", the primary's network with our entry last.
// '-' sorts before '.', so it comes just before the primary and runtimes
// use it; a rewrite of the primary by its CNI, with the agent running or
// not, never takes sluice out of the chain the runtime reads.
const chainedSuffix = "-sluice.conflist"

// errNoPrimary: the conf dir has no config to chain from (yet).
var errNoPrimary = errors.New("no primary CNI config")

// primaryConf is the config file our conflist is built from, as read.
type primaryConf struct {
	snapshot
	conflist bool // false: a single-plugin .conf/.json
}

// target is our conflist for this primary, which sorts just before it.
func (p primaryConf) target() string {
	return ownedConfFor(p.path)
}

func ownedConfFor(primary string) string {
	return strings.TrimSuffix(primary, filepath.Ext(primary)) + chainedSuffix
}

// ours reports whether name is a config file the installer creates, and so
// never a primary.
func ours(name string) bool {
	return name == OwnConfName || name == legacyOwnConfName || strings.HasSuffix(name, chainedSuffix)
}

// findPrimary reads the primary config: ConfName if set, else the lexically
// first config that is not ours, which is the file runtimes use. A primary
// that does not parse stays the primary: it is most likely being written by
// its CNI, and moving to the next file would edit (or shadow) a file for no
// reason but a half-written one. The caller goes not ready and waits.
func (in *Installer) findPrimary() (primaryConf, error) {
	dir := in.conf
	if in.cfg.ConfName != "" {
		return in.namedPrimary(filepath.Join(dir, in.cfg.ConfName))
	}
	files, err := libcni.ConfFiles(dir, []string{".conf", ".conflist", ".json"})
	if err != nil {
		return primaryConf{}, fmt.Errorf("list CNI configs: %w", err)
	}
	sort.Strings(files)
	for _, f := range files {
		if ours(filepath.Base(f)) {
			continue
		}
		p, err := readPrimary(f)
		if errors.Is(err, fs.ErrNotExist) {
			return p, fmt.Errorf("primary CNI config %s was removed while being read; retrying", f)
		}
		if err != nil {
			return p, fmt.Errorf("the primary CNI config (the first in %s) is unusable, waiting for it and writing nothing meanwhile (--cni-conf-name picks another file): %w", dir, err)
		}
		return p, nil
	}
	return primaryConf{}, fmt.Errorf("%w in %s to chain from yet, waiting for one", errNoPrimary, dir)
}

// namedPrimary reads an operator-named primary. Earlier versions converted
// a named .conf to a .conflist of the same stem and removed the .conf; that
// .conflist is the primary then.
func (in *Installer) namedPrimary(path string) (primaryConf, error) {
	p, err := readPrimary(path)
	if errors.Is(err, fs.ErrNotExist) && !p.conflist {
		// Only a conversion of ours, recognised by our entry in it or by
		// our conflist built from it: another network's .conflist of the
		// same stem is not the named file.
		conv, cerr := readPrimary(strings.TrimSuffix(path, filepath.Ext(path)) + ".conflist")
		if cerr == nil && (hasEntry(conv.data) || isOwned(conv.target())) {
			p, err = conv, nil
		}
	}
	if errors.Is(err, fs.ErrNotExist) {
		return p, fmt.Errorf("%w: %s does not exist yet, waiting for it", errNoPrimary, path)
	}
	if err != nil {
		return p, fmt.Errorf("the primary CNI config (--cni-conf-name) is unusable, waiting for it and writing nothing meanwhile: %w", err)
	}
	return p, nil
}

// readPrimary reads path and checks it as the runtime would, plus the
// network name a single-plugin conf needs to be listed.
func readPrimary(path string) (primaryConf, error) {
	p := primaryConf{conflist: filepath.Ext(path) == ".conflist"}
	var err error
	if p.snapshot, err = readConf(path); err != nil {
		p.path = path
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
