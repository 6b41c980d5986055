package installer

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sluicemesh/sluice/installer/conflist"
)

// Installer keeps the sluice plugin binary and its CNI config entry in place.
// Create it with New, start it with Run, read its state with Ready.
type Installer struct {
	cfg     Config
	log     *slog.Logger
	entry   []byte   // our plugin object, compact
	own     []byte   // the whole OwnConfName file, non-chained mode only
	srcHash [32]byte // sha256 of PluginBinary, read once in New

	// mu serialises syncs and Uninstall; the fields below it are only
	// touched with it held.
	mu          sync.Mutex
	uninstalled bool
	verified    map[string]stamp // binaries whose content matched srcHash
	placed      map[string]bool  // targets that were in place once: writing one again is a restore
	owned       string           // chained mode: our conflist as last written
	warnedOnce  map[string]bool  // log lines that would repeat on every resync
	restores    restoreLog
	pins        map[string]*pinnedDir // configured dir → the one written in (pindir.go)
	conf        string                // the pinned conf dir to work in, set by each sync

	stateMu sync.Mutex
	ready   bool
	reason  string
	stats   Stats
}

// Stats counts what the installer did, for metrics.
type Stats struct {
	// Writes counts files the installer wrote or removed.
	Writes uint64
	// Restores counts writes that put back something that had already been
	// in place, i.e. repairs of someone else's change.
	Restores uint64
	// LastRestore is the most recent restore; zero if there was none.
	LastRestore Restore
}

// Restore is one repair: which file, what had happened to it, and when.
type Restore struct {
	Time time.Time
	Path string
	What string
}

// New checks cfg and reads the plugin binary's hash; it touches nothing on
// the node.
func New(cfg Config) (*Installer, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("invalid installer config: %w", err)
	}
	entry, err := conflist.Entry(cfg.PluginConfig)
	if err != nil {
		return nil, err
	}
	in := &Installer{
		cfg:        cfg,
		log:        cfg.Logger.With("component", "installer"),
		entry:      entry,
		verified:   map[string]stamp{},
		placed:     map[string]bool{},
		warnedOnce: map[string]bool{},
		restores:   restoreLog{},
		pins:       map[string]*pinnedDir{},
		reason:     "not installed yet",
	}
	if !cfg.Chained {
		if in.own, err = conflist.Own(cfg.NetworkName, entry); err != nil {
			return nil, err
		}
	}
	if in.srcHash, err = hashFile(cfg.PluginBinary); err != nil {
		return nil, fmt.Errorf("read plugin binary to install: %w", err)
	}
	return in, nil
}

// Ready reports whether the plugin binary (by content hash) and our CNI
// config entry are in place, and if not, why.
func (in *Installer) Ready() (bool, string) {
	in.stateMu.Lock()
	defer in.stateMu.Unlock()
	return in.ready, in.reason
}

// Stats returns a snapshot of the installer's counters.
func (in *Installer) Stats() Stats {
	in.stateMu.Lock()
	defer in.stateMu.Unlock()
	return in.stats
}

// Uninstall removes our conflist (chained: every one, and any entry an
// earlier version left in the primary) or OwnConfName (non-chained),
// atomically, and stops a running Run from putting it back. The primary
// is otherwise left as it is. The plugin binary stays: a pod sandbox being
// torn down may still need it for DEL, and a config without our entry
// never calls it.
func (in *Installer) Uninstall() error {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.uninstalled = true
	// Asked for, so not worth a warning.
	defer in.updateState(false, "uninstalled")

	conf, err := in.pin(in.cfg.ConfDir)
	if err != nil {
		return err
	}
	in.conf = conf
	if !in.cfg.Chained {
		in.countWrite()
		return removeFile(filepath.Join(in.conf, OwnConfName))
	}
	in.removeOwnedConfs(func(string) bool { return true })
	p, err := in.findPrimary()
	switch {
	case errors.Is(err, errNoPrimary):
		return nil
	case err != nil:
		return fmt.Errorf("find the primary config to check for an earlier version's entry: %w", err)
	case !p.conflist:
		return nil
	}
	return in.dropEntry(p.path)
}

// sync makes one pass: every binary, then the config. It is idempotent:
// what is already in place is not written again.
func (in *Installer) sync() {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.uninstalled {
		return
	}
	var problems []string
	for _, dir := range in.cfg.BinDirs {
		at, err := in.pin(dir)
		if err == nil {
			err = in.syncBinary(at)
		}
		if err != nil {
			problems = append(problems, in.show(err.Error()))
		}
	}
	conf, err := in.pin(in.cfg.ConfDir)
	if err == nil {
		in.conf = conf
		err = in.syncConf()
	}
	if err != nil {
		problems = append(problems, in.show(err.Error()))
	}
	if len(problems) > 0 {
		in.setState(false, strings.Join(problems, "; "))
		return
	}
	in.setState(true, "plugin binary and CNI config entry in place")
}

// repairing drops readiness before a write, so a reader never sees "ready"
// while something is missing, and counts the write as a restore when the
// target had been in place before.
func (in *Installer) repairing(at, what string) {
	path := in.show(at)
	in.updateState(false, fmt.Sprintf("writing %s: %s", path, what))
	in.countWrite()
	if !in.placed[at] {
		in.log.Info("installing", "path", path, "reason", what)
		return
	}
	now := time.Now()
	in.log.Info("restoring", "path", path, "change", what)
	in.stateMu.Lock()
	in.stats.Restores++
	in.stats.LastRestore = Restore{Time: now, Path: path, What: what}
	in.stateMu.Unlock()
	in.restores.record(in.log, now, path, what)
}

func (in *Installer) countWrite() {
	in.stateMu.Lock()
	in.stats.Writes++
	in.stateMu.Unlock()
}

func (in *Installer) setState(ready bool, reason string) {
	if !in.updateState(ready, reason) {
		return
	}
	if ready {
		in.log.Info("ready", "reason", reason)
	} else {
		in.log.Warn("not ready", "reason", reason)
	}
}

// updateState records readiness and tells OnChange, without logging: the
// short not-ready window of a repair is logged as the repair itself.
func (in *Installer) updateState(ready bool, reason string) bool {
	in.stateMu.Lock()
	changed := in.ready != ready || in.reason != reason
	in.ready, in.reason = ready, reason
	in.stateMu.Unlock()
	if changed && in.cfg.OnChange != nil {
		in.cfg.OnChange(ready, reason)
	}
	return changed
}

// warnOnce logs msg the first time key is seen, so a condition that
// persists across resyncs is reported once, not every few seconds.
func (in *Installer) warnOnce(key, msg string, args ...any) {
	if in.warnedOnce[key] {
		return
	}
	in.warnedOnce[key] = true
	in.log.Warn(msg, args...)
}

func hashFile(path string) ([32]byte, error) {
	var sum [32]byte
	// Non-blocking: the path may have become a FIFO since it was checked.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return sum, err
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return sum, fmt.Errorf("hash %s: not a regular file", path)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return sum, fmt.Errorf("hash %s: %w", path, err)
	}
	copy(sum[:], h.Sum(nil))
	return sum, nil
}
