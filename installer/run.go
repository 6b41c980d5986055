package installer

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/sluicemesh/sluice/installer/conflist"
)

// settleDelay lets a burst of events (a CNI writing its file in several
// chunks, our own temp file and rename) end before the next sync reads the
// directory, so a half-written file is seen less often. It is well inside
// the one-second repair budget.
const settleDelay = 50 * time.Millisecond

// Run installs, then watches the bin and conf directories and repairs what
// is changed until ctx is done. Failures to install are logged and reported
// by Ready, and retried on the next event or resync; Run only returns an
// error when it cannot watch at all.
func (in *Installer) Run(ctx context.Context) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("create fsnotify watcher: %w", err)
	}
	defer w.Close()
	watched := map[string]os.FileInfo{}

	in.removeStaleTemps()
	resync := func() {
		in.sync()
		// A directory that was deleted or replaced loses its watch; the
		// sync recreated it, so watch it again and re-check what may have
		// changed before the watch was in place.
		if in.watch(w, watched) {
			in.sync()
		}
	}
	resync()

	ticker := time.NewTicker(in.cfg.ResyncInterval)
	defer ticker.Stop()
	var settle <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return errors.New("fsnotify watcher closed")
			}
			if settle == nil && in.relevant(ev) {
				settle = time.After(settleDelay)
			}
		case err, ok := <-w.Errors:
			if !ok {
				return errors.New("fsnotify watcher closed")
			}
			// An overflow means events were lost: look at everything.
			in.log.Warn("fsnotify error, resyncing", "err", err)
			if settle == nil {
				settle = time.After(settleDelay)
			}
		case <-settle:
			settle = nil
			resync()
		case <-ticker.C:
			resync()
		}
	}
}

// removeStaleTemps clears what an earlier run left between create and
// rename; with mu held, so it never races a write of ours.
func (in *Installer) removeStaleTemps() {
	in.mu.Lock()
	defer in.mu.Unlock()
	for _, dir := range in.dirs() {
		at, err := in.pin(dir)
		if err == nil {
			err = removeStaleTemps(at)
		}
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			in.log.Warn("could not remove stale temp files", "dir", dir, "err", in.show(err.Error()))
		}
	}
}

// dirs lists every directory the installer writes to.
func (in *Installer) dirs() []string {
	return append([]string{in.cfg.ConfDir}, in.cfg.BinDirs...)
}

// watch (re)adds a watch for every directory that is not watched, or was
// replaced since it was, and reports whether it added any.
func (in *Installer) watch(w *fsnotify.Watcher, watched map[string]os.FileInfo) bool {
	added := false
	// fsnotify drops a watch when its directory is deleted; a recreated
	// directory may even reuse the inode, so ask the watcher as well.
	live := w.WatchList()
	for _, dir := range in.dirs() {
		fi, err := os.Stat(dir)
		if err != nil {
			in.log.Warn("cannot watch directory", "dir", dir, "err", err)
			delete(watched, dir)
			continue
		}
		if prev, ok := watched[dir]; ok && os.SameFile(prev, fi) && slices.Contains(live, dir) {
			continue
		}
		_ = w.Remove(dir) // the old inode's watch, if the kernel has not dropped it
		if err := w.Add(dir); err != nil {
			in.log.Warn("cannot watch directory", "dir", dir, "err", err)
			continue
		}
		watched[dir] = fi
		added = true
	}
	return added
}

// relevant filters out events that cannot change what we keep in place:
// our own temp files and unrelated files in the bin directories.
func (in *Installer) relevant(ev fsnotify.Event) bool {
	name := filepath.Base(ev.Name)
	if strings.HasPrefix(name, tempPrefix) {
		return false
	}
	dir := filepath.Dir(ev.Name)
	switch {
	case ev.Name == in.cfg.ConfDir || dir == in.cfg.ConfDir && isConfFile(name):
		return true
	case name == conflist.PluginType:
		return true
	}
	for _, d := range in.cfg.BinDirs {
		if ev.Name == d {
			return true
		}
	}
	return false
}
