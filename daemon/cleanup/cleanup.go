// Package cleanup is `sluice-agent cleanup`, and what an agent leaving
// the node with --cleanup-on-uninstall does after it stopped: it removes
// what the agent put on the node, found through the agent's own flags:
// every journaled pod's capture rules (only in the netns the record names,
// as a DEL would), the host probe table, the conflist entry, the plugin
// binary, the journal's files and the sockets. Nothing else is touched:
// not a file in the state dir the journal did not write, nor a state dir
// that is not sluice's, nor a socket something still listens on. Run
// twice, it changes nothing.
package cleanup

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/vishvananda/netns"

	"github.com/sluicemesh/sluice/daemon/podns"
	"github.com/sluicemesh/sluice/daemon/redirect"
	"github.com/sluicemesh/sluice/daemon/redirect/kernel"
	"github.com/sluicemesh/sluice/daemon/workloads"
	"github.com/sluicemesh/sluice/daemon/ztunnel"
	"github.com/sluicemesh/sluice/installer"
	"github.com/sluicemesh/sluice/installer/conflist"
	"github.com/sluicemesh/sluice/internal/dirlock"
)

// Config is where the agent's things are, from its flags.
type Config struct {
	StateDir   string   // --state-dir: the journal and its lock
	NetnsRoots []string // --netns-roots
	HostProc   string   // --host-proc
	HostNetns  string   // --host-netns; "" is this process's
	// Installer is the installer's config; nil when the agent installs
	// nothing (--install=false).
	Installer *installer.Config
	// Socket (--socket) and ZtunnelSocket (--ztunnel-socket) are removed
	// when nothing listens; the agent socket's dir too, when empty. The
	// ZDS socket's dir is ztunnel's as much as ours.
	Socket, ZtunnelSocket string
	Log                   *slog.Logger
}

// Run holds the state dir's lock throughout: a running agent holds it,
// and cleaning up under a live agent would uncapture its pods while it
// believes them captured. A state dir that is not sluice's
// (workloads.ClaimDir: mistyped flags) stops it before it touches anything.
func Run(ctx context.Context, cfg Config) error {
	lock, err := dirlock.Acquire(cfg.StateDir, 0o700)
	if errors.Is(err, dirlock.ErrHeld) {
		return fmt.Errorf("an agent is running on this node (it holds %s): stop it first", cfg.StateDir)
	}
	if err != nil {
		return err
	}
	if err := workloads.ClaimDir(cfg.StateDir); err != nil {
		_ = lock.Release()
		return fmt.Errorf("%w; nothing was cleaned up", err)
	}
	errs := []error{releaseAll(ctx, cfg)}
	if cfg.Installer != nil {
		errs = append(errs, uninstallFiles(*cfg.Installer))
	}
	errs = append(errs, removeJournal(cfg.StateDir, cfg.Log), removeDeadSocket(cfg.Socket), removeDeadSocket(cfg.ZtunnelSocket))
	_ = lock.Release()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	for _, dir := range []string{cfg.StateDir, filepath.Dir(cfg.Socket)} {
		_ = os.Remove(dir) // only when empty: it may hold what is not ours
	}
	cfg.Log.Info("cleanup done: nothing of sluice is left on the node")
	return nil
}

// releaseAll releases every journaled attachment as a DEL would (its
// ownership rules: a netns whose inode moved is not touched), then removes
// the host probe table.
func releaseAll(ctx context.Context, cfg Config) error {
	log := cfg.Log
	opener, err := podns.NewOpener(cfg.NetnsRoots, cfg.HostProc)
	if err != nil {
		return err
	}
	hostPath := cfg.HostNetns
	if hostPath == "" {
		hostPath = "/proc/self/ns/net"
	}
	host, err := netns.GetFromPath(hostPath)
	if err != nil {
		return fmt.Errorf("--host-netns %s: %w", hostPath, err)
	}
	defer host.Close()
	store, err := workloads.Open(workloads.Config{Dir: cfg.StateDir, Opener: opener, Kernel: kernel.Netlink{},
		Log: log.With("component", "workloads"), Ambient: &workloads.Ambient{Ztunnel: noZtunnel{}, Host: host}})
	if err != nil {
		return err
	}
	var errs []error
	for _, r := range store.List() {
		if err := store.Release(ctx, r.Attachment, ""); err != nil {
			errs = append(errs, err)
			continue
		}
		log.Info("removed a pod's capture rules", "pod", r.PodNamespace+"/"+r.PodName, "attachment", r.Attachment.String())
	}
	if err := (kernel.Netlink{}).RemoveHostTable(redirect.Netns(host)); err != nil {
		errs = append(errs, fmt.Errorf("remove the host probe table: %w", err))
	}
	return errors.Join(errs...)
}

// noZtunnel is ztunnel with the agent gone: nobody is connected, so there
// is nobody to tell that a pod left.
type noZtunnel struct{}

func (noZtunnel) Add(context.Context, ztunnel.Workload) error {
	return ztunnel.ErrNotConnected
}
func (noZtunnel) Del(context.Context, string) error { return nil }

// AwaitConnection does not wait: no ztunnel will come.
func (noZtunnel) AwaitConnection(context.Context, ztunnel.Workload) error { return nil }

// uninstallFiles removes the conflist entry (or own conflist) and the
// plugin binary from every bin dir.
func uninstallFiles(ic installer.Config) error {
	in, err := installer.New(ic)
	if err != nil {
		return err
	}
	errs := []error{in.Uninstall()}
	for _, dir := range ic.BinDirs {
		errs = append(errs, removeRegular(filepath.Join(dir, conflist.PluginType)))
	}
	return errors.Join(errs...)
}

// removeRegular removes path if it is a regular file; a symlink or a
// directory under our name is someone else's.
func removeRegular(path string) error {
	fi, err := os.Lstat(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil
	case err != nil:
		return err
	case !fi.Mode().IsRegular():
		return fmt.Errorf("%s is not a regular file; left in place", path)
	}
	return os.Remove(path)
}

// removeJournal removes the journal's files (workloads.RemoveJournal) and
// names what it left: files someone else put in the state dir, which keep
// the dir in place too.
func removeJournal(dir string, log *slog.Logger) error {
	left, err := workloads.RemoveJournal(dir)
	if len(left) > 0 {
		log.Warn("left in the state dir: not sluice's", "dir", dir, "files", left)
	}
	return err
}

// removeDeadSocket removes a socket file nothing listens on: a listener
// (a newer agent, another ztunnel server) keeps it.
func removeDeadSocket(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi.Mode()&os.ModeSocket == 0 {
		return fmt.Errorf("%s is not a socket; left in place", path)
	}
	conn, err := net.DialTimeout("unix", path, time.Second)
	if err == nil {
		conn.Close()
		return fmt.Errorf("%s: something still listens; left in place", path)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("%s: %w; left in place", path, err)
	}
	return os.Remove(path)
}
