package workloads

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/vishvananda/netns"

	"github.com/sluicemesh/sluice/daemon/redirect"
)

// NetnsOpener opens a pod's network namespace from the path the runtime
// gave, refusing one that is not (podns.Opener). A namespace that is gone
// is an error wrapping podns.ErrNotExist; the caller closes the handle.
// OpenContext is the one the ADD path uses: it returns by ctx's deadline
// even when the path blocks (a FIFO, a hung mount).
//
// A namespace is known by its inode and netns cookie (netnsid.go): Cookie
// reads the cookie (0 on kernels without one), and Find opens the
// namespace (inode, cookie) through another path when the enrolled one has
// gone, or says it is held only outside the roots (podns.ErrHeldElsewhere)
// or gone (podns.ErrNotExist).
type NetnsOpener interface {
	Open(path string) (netns.NsHandle, error)
	OpenContext(ctx context.Context, path string) (netns.NsHandle, error)
	Cookie(ns netns.NsHandle) (uint64, error)
	Find(ino, cookie uint64) (netns.NsHandle, string, error)
}

// Config is everything a Store works with, given once to Open.
type Config struct {
	// Dir is the state dir holding the journal; created 0700 if missing.
	Dir string
	// Opener opens the netns paths of ADD, DEL and CHECK (required).
	Opener NetnsOpener
	// Kernel programs rulesets and the host probe table (required):
	// kernel.Netlink (package redirect/kernel) in the agent.
	Kernel redirect.Kernel
	Log    *slog.Logger
	// OnApply, when set, observes the duration of each ruleset
	// transaction (metrics).
	OnApply func(time.Duration)
	// OnReassert, when set, hears of each ruleset re-applied because the
	// kernel drifted, the start-up Reconcile's included (Events).
	OnReassert func(r Record, drift []string)
	// OnNetnsReplaced, when set, hears of each record whose path was found
	// naming another namespace (r.Netns is that path): followed is where
	// its own netns is verified now, "" when the record was dropped
	// (Events).
	OnNetnsReplaced func(r Record, followed string)
	// Ambient, when set, hands ambient pods to ztunnel and the host probe
	// table; without it an ambient ADD is refused.
	Ambient *Ambient
}

// Open loads the journal in cfg.Dir. It does not touch the kernel; call
// Reconcile for that.
func Open(cfg Config) (*Store, error) {
	switch {
	case cfg.Opener == nil:
		return nil, errors.New("workloads: Config.Opener is required")
	case cfg.Kernel == nil:
		return nil, errors.New("workloads: Config.Kernel is required")
	case cfg.Log == nil:
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("create state dir: %w", err)
	}
	s := &Store{dir: cfg.Dir, opener: cfg.Opener, kernel: cfg.Kernel, log: cfg.Log,
		onApply: cfg.OnApply, onReassert: cfg.OnReassert, onReplaced: cfg.OnNetnsReplaced, ambient: cfg.Ambient,
		recs: map[Attachment]*Record{}, released: map[Attachment]bool{}}
	recs, err := s.loadJournal()
	if err != nil {
		return nil, err
	}
	for _, r := range recs {
		s.recs[r.Attachment] = r
	}
	return s, nil
}
