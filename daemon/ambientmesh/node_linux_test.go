package ambientmesh

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netns"

	"github.com/sluicemesh/sluice/daemon/redirect"
	"github.com/sluicemesh/sluice/daemon/workloads"
	"github.com/sluicemesh/sluice/test/harness/nstest"
)

// nodeConfig is a node in host, with no kubelet under its /proc and its
// ZDS socket in a directory of its own.
func nodeConfig(t *testing.T, host *nstest.NS) NodeConfig {
	t.Helper()
	dir, err := os.MkdirTemp("", "zds") // sun_path holds 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return NodeConfig{HostNetns: host.Path, HostProc: t.TempDir(), Host: redirect.DefaultHostConfig(), FollowKubelet: true,
		Recheck: 10 * time.Millisecond, ZtunnelSocket: filepath.Join(dir, "ztunnel.sock"),
		Open:  func(string) (netns.NsHandle, error) { return 0, errors.New("no pods here") },
		Store: func() *workloads.Store { t.Error("the store was read with no ztunnel connected"); return nil },
		Log:   slog.New(slog.DiscardHandler)}
}

func hasHostTable(t *testing.T, host *nstest.NS) bool {
	t.Helper()
	return strings.Contains(host.Run(t, "nft", "list", "tables"), redirect.HostTableName)
}

// NewNode writes the host table and listens; Stop waits for the probe
// owner and the ZDS server (its socket unlinked), and removes the table
// only when the agent leaves the node.
func TestNodeStopsInOrder(t *testing.T) {
	host := nstest.New(t, "host")
	cfg := nodeConfig(t, host)
	for _, leaving := range []bool{false, true} {
		n, err := NewNode(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if !hasHostTable(t, host) {
			t.Fatal("NewNode wrote no host table")
		}
		if _, err := os.Stat(cfg.ZtunnelSocket); err != nil {
			t.Fatalf("NewNode is not listening: %v", err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		n.Start(ctx, func(err error) { t.Errorf("the node failed: %v", err) })
		cancel() // Stop waits for what Start ran, however far it got

		start := time.Now()
		n.Stop(leaving)
		if d := time.Since(start); d > 4*time.Second {
			t.Errorf("leaving=%v: Stop took %v: a wait ran out", leaving, d)
		}
		if _, err := os.Stat(cfg.ZtunnelSocket); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("leaving=%v: the ZDS socket is still there after Stop: %v", leaving, err)
		}
		if got := hasHostTable(t, host); got == leaving {
			t.Errorf("leaving=%v: host table there after Stop: %v", leaving, got)
		}
	}
}

// A NewNode that cannot build every part fails whole.
func TestNewNodeFails(t *testing.T) {
	host := nstest.New(t, "host")
	cfg := nodeConfig(t, host)
	cfg.HostNetns = filepath.Join(t.TempDir(), "absent")
	if _, err := NewNode(cfg); err == nil || !strings.Contains(err.Error(), "--host-netns") {
		t.Errorf("no host netns: err %v", err)
	}
	cfg = nodeConfig(t, host)
	if err := os.WriteFile(filepath.Join(filepath.Dir(cfg.ZtunnelSocket), "file"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg.ZtunnelSocket = filepath.Join(filepath.Dir(cfg.ZtunnelSocket), "file", "ztunnel.sock")
	if n, err := NewNode(cfg); err == nil {
		t.Errorf("a ZDS socket under a file: built %v", n)
	}
}

// fdIs is whether fd is open on what link names (/proc/self/fd's form).
func fdIs(fd int, link string) bool {
	got, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd))
	return err == nil && got == link
}

// Close lets go of everything NewNode opened when the node never started
// (a later part of the agent failed): its socket unlinked, the host netns
// handle closed. Twice is once.
func TestNodeCloseLetsGo(t *testing.T) {
	host := nstest.New(t, "host")
	cfg := nodeConfig(t, host)
	n, err := NewNode(cfg)
	if err != nil {
		t.Fatal(err)
	}
	hostFD := int(n.host)
	hostLink, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", hostFD))
	if err != nil {
		t.Fatal(err)
	}
	n.Close()
	n.Close()
	if _, err := os.Stat(cfg.ZtunnelSocket); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the ZDS socket is still there after Close: %v", err)
	}
	if fdIs(hostFD, hostLink) {
		t.Errorf("the host netns handle (fd %d, %s) is open after Close", hostFD, hostLink)
	}
	if n, err = NewNode(cfg); err != nil {
		t.Fatalf("a node after Close: %v", err)
	}
	n.Close()
}
