package ztunnel

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
)

// Workloads another agent enrolled (istio-cni's ambient pods) are in every
// snapshot until adopted, once each, with their netns: a snapshot that left
// them out would make ztunnel drop their proxies.
func TestSnapshotListsPendingWorkloads(t *testing.T) {
	var pending atomic.Pointer[[]Workload]
	h := start(t, func(c *Config) {
		c.Pending = func(context.Context) ([]Workload, error) { return *pending.Load(), nil }
	})
	a, _ := h.enroll("a")
	istio, ino := h.pod("istio")
	pending.Store(&[]Workload{istio, a}) // a is adopted already: listed by Snapshot

	z := connectZtunnel(t, h.path)
	got := z.snapshot()
	if k := kinds(got); !slices.Equal(k, []string{"add:a", "add:istio", "snapshot_sent"}) {
		t.Fatalf("snapshot %v, want a, then the pending istio, once each", k)
	}
	if got[1].netns != ino {
		t.Errorf("pending workload sent with netns %d, want %d", got[1].netns, ino)
	}
	h.connected(1)
}

// When the pending list cannot be read (the pod cache is not synced), no
// snapshot is sent: the connection is dropped before anything, so ztunnel
// keeps what it holds and reconnects.
func TestSnapshotNotSentWithoutPending(t *testing.T) {
	var fail atomic.Bool
	fail.Store(true)
	h := start(t, func(c *Config) {
		c.Pending = func(context.Context) ([]Workload, error) {
			if fail.Load() {
				return nil, errors.New("pod cache not synced")
			}
			return nil, nil
		}
	})
	h.enroll("a")
	z := connectZtunnel(t, h.path)
	z.expectHangup()
	if ok, _ := h.srv.Ready(); ok {
		t.Fatal("ready without a snapshot")
	}
	fail.Store(false)
	z2 := connectZtunnel(t, h.path)
	if k := kinds(z2.snapshot()); !slices.Equal(k, []string{"add:a", "snapshot_sent"}) {
		t.Fatalf("snapshot after the cache synced %v", k)
	}
}
