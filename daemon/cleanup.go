package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
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

// runCleanup is `sluice-agent cleanup [agent flags]`: with the agent
// stopped, it removes what the agent put on the node, found through the
// same flags: every journaled pod's capture rules (only in the netns the
// record names, as a DEL would), the host probe table, the conflist entry,
// the plugin binary, the journal's files and the sockets. Nothing else is
// touched: not a file in the state dir the journal did not write, nor a
// state dir that is not sluice's.
func runCleanup(args []string, getenv func(string) string, errOut io.Writer) int {
	cfg, err := parseConfig(args, getenv, errOut)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(errOut, "sluice-agent cleanup: %v (see sluice-agent --help)\n", err)
		return 2
	}
	log, err := cfg.logger(errOut)
	if err != nil {
		fmt.Fprintf(errOut, "sluice-agent cleanup: %v\n", err)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := cleanup(ctx, cfg, log); err != nil {
		fmt.Fprintf(errOut, "sluice-agent cleanup: %v\n", err)
		return 1
	}
	return 0
}

// cleanup holds the state dir's lock throughout: a running agent holds
// it, and cleaning up under a live agent would uncapture its pods while it
// believes them captured. A state dir that is not sluice's
// (workloads.ClaimDir: mistyped flags) stops it before it touches anything.
func cleanup(ctx context.Context, cfg *config, log *slog.Logger) error {
	lock, err := dirlock.Acquire(cfg.stateDir, 0o700)
	if errors.Is(err, dirlock.ErrHeld) {
		return fmt.Errorf("an agent is running on this node (it holds %s): stop it first", cfg.stateDir)
	}
	if err != nil {
		return err
	}
	if err := workloads.ClaimDir(cfg.stateDir); err != nil {
		_ = lock.Release()
		return fmt.Errorf("%w; nothing was cleaned up", err)
	}
	errs := []error{releaseAll(ctx, cfg, log)}
	if cfg.install {
		errs = append(errs, uninstallFiles(cfg, log))
	}
	errs = append(errs, removeJournal(cfg.stateDir, log), removeDeadSocket(cfg.socket), removeDeadSocket(cfg.ztunnelSocket))
	_ = lock.Release()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	for _, dir := range []string{cfg.stateDir, filepath.Dir(cfg.socket)} {
		_ = os.Remove(dir) // only when empty: it may hold what is not ours
	}
	log.Info("cleanup done: nothing of sluice is left on the node")
	return nil
}

// releaseAll releases every journaled attachment as a DEL would (its
// ownership rules: a netns whose inode moved is not touched), then removes
// the host probe table.
func releaseAll(ctx context.Context, cfg *config, log *slog.Logger) error {
	opener, err := podns.NewOpener(splitList(cfg.netnsRoots), cfg.hostProc)
	if err != nil {
		return err
	}
	hostPath := cfg.hostNetns
	if hostPath == "" {
		hostPath = "/proc/self/ns/net"
	}
	host, err := netns.GetFromPath(hostPath)
	if err != nil {
		return fmt.Errorf("--host-netns %s: %w", hostPath, err)
	}
	defer host.Close()
	store, err := workloads.Open(workloads.Config{Dir: cfg.stateDir, Opener: opener, Kernel: kernel.Netlink{},
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
func uninstallFiles(cfg *config, log *slog.Logger) error {
	ic, err := cfg.installerConfig(log)
	if err != nil {
		return err
	}
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
