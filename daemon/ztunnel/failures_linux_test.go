package ztunnel

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/sluicemesh/sluice/api/zds"
)

func TestHungZtunnelIsDropped(t *testing.T) {
	h := start(t, func(c *Config) { c.Timeout = 300 * time.Millisecond })
	z := connectZtunnel(t, h.path)
	z.snapshot()
	h.connected(1)

	// ztunnel stops reading: the request sits unread and is never acked.
	w, _ := h.pod("a")
	if err := h.srv.Add(context.Background(), w); err == nil {
		t.Fatal("Add to a hung ztunnel succeeded")
	}
	h.connected(0)
	if ok, _ := h.srv.Ready(); ok {
		t.Error("ready with only a hung ztunnel")
	}
	z.recv() // the request was written before the connection was dropped
	z.expectHangup()
}

func TestVanishedZtunnelIsNoticedWhileIdle(t *testing.T) {
	h := start(t, nil)
	z := connectZtunnel(t, h.path)
	z.snapshot()
	h.connected(1)
	z.uc.Close()
	h.connected(0)
	if ok, _ := h.srv.Ready(); ok {
		t.Error("ready after the only ztunnel went away")
	}
}

func TestGarbageDropsOnlyThatConnection(t *testing.T) {
	h := start(t, nil)
	good := connectZtunnel(t, h.path)
	good.snapshot()
	h.connected(1)

	chatty := connectZtunnel(t, h.path)
	chatty.snapshot()
	h.connected(2)
	chatty.sendRaw([]byte{0xff, 0xff, 0xff}) // unasked for and not protobuf
	chatty.expectHangup()
	h.connected(1)

	noHello := dialZtunnel(t, h.path)
	noHello.sendRaw([]byte{0xff, 0xff, 0xff})
	noHello.expectHangup()

	// The good connection is the newest left and still serves.
	w, _ := h.pod("a")
	h.addAcked(good, w, 0)
	h.connected(1)
}

func TestGarbledAckDropsConnection(t *testing.T) {
	h := start(t, nil)
	z := connectZtunnel(t, h.path)
	z.snapshot()
	h.connected(1)

	w, _ := h.pod("a")
	errc := h.add(context.Background(), w)
	z.recv()
	z.sendRaw([]byte{0xff, 0xff, 0xff})
	if err := <-errc; err == nil {
		t.Fatal("Add answered with garbage succeeded")
	}
	z.expectHangup()
	h.connected(0)
}

func TestHelloIsRequired(t *testing.T) {
	h := start(t, func(c *Config) { c.Timeout = 200 * time.Millisecond })
	for name, hello := range map[string]func(*fakeZtunnel){
		"future version": func(z *fakeZtunnel) { z.send(&zds.ZdsHello{Version: zds.Version(2)}) },
		"not a hello":    func(z *fakeZtunnel) { z.sendRaw([]byte{0xff, 0xff, 0xff}) },
		"silent":         func(*fakeZtunnel) {},
	} {
		t.Run(name, func(t *testing.T) {
			z := dialZtunnel(t, h.path)
			hello(z)
			z.expectHangup()
			if n := h.srv.Connections(); n != 0 {
				t.Errorf("%d connections counted", n)
			}
		})
	}
}

func TestRunStopsAndClosesConnections(t *testing.T) {
	h := start(t, nil)
	z := connectZtunnel(t, h.path)
	z.snapshot()
	h.connected(1)

	if err := h.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	z.expectHangup()
	if _, err := os.Lstat(h.path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket left behind after Run returned: %v", err)
	}
}
