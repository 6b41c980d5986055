package rpc

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicemesh/sluice/daemon/policy"
	"github.com/sluicemesh/sluice/daemon/redirect"
	"github.com/sluicemesh/sluice/daemon/ztunnel"
	"github.com/sluicemesh/sluice/test/harness/nstest"
)

// gatedZtunnel is a ztunnel that is away until connect: AwaitConnection
// waits for it, as ztunnel.Server's does, counting the waiters.
type gatedZtunnel struct {
	fakeZtunnel
	mu      sync.Mutex
	waiting int
	up      chan struct{}
}

func (z *gatedZtunnel) AwaitConnection(ctx context.Context, _ ztunnel.Workload) error {
	z.mu.Lock()
	z.waiting++
	z.mu.Unlock()
	defer func() { z.mu.Lock(); z.waiting--; z.mu.Unlock() }()
	select {
	case <-z.up:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (z *gatedZtunnel) waiters() int {
	z.mu.Lock()
	defer z.mu.Unlock()
	return z.waiting
}

// A rebooted node re-creates its pods before ztunnel is back: its ambient
// pods' ADDs wait for ztunnel, and must hold none of the agent's ADD slots
// while they do, or a sidecar pod's ADD waits for a slot until its
// deadline (before: ResourceExhausted with one slot). Every ambient ADD
// goes on once ztunnel connects, more of them than the slots.
func TestUnitAmbientWaitHoldsNoADDSlot(t *testing.T) {
	zt := &gatedZtunnel{up: make(chan struct{})}
	u, _ := ambientUnit(t, zt)
	u.cni.Inflight = NewInflight(1)
	u.cni.Policy = policyFunc(func(p policy.Pod) (policy.Decision, error) {
		if strings.HasPrefix(p.Name, "pod-amb") {
			return policy.Decision{Capture: true, Spec: redirect.DefaultAmbientSpec()}, nil
		}
		return policy.Decision{Capture: true, Spec: redirect.DefaultSpec()}, nil
	})

	const ambient = 5
	done := make(chan error, ambient)
	for i := range ambient {
		id := "amb" + string(rune('a'+i))
		u.ns.Add("/netns/" + id)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_, err := u.cni.Add(ctx, addReq(id))
			done <- err
		}()
	}
	nstest.Eventually(t, 10*time.Second, func() bool { return zt.waiters() == ambient }, "every ambient ADD waiting for ztunnel")

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	u.ns.Add("/netns/side")
	if resp, err := u.cni.Add(ctx, addReq("side")); err != nil || resp.Mode.String() != "MODE_SIDECAR" {
		t.Fatalf("a sidecar pod's ADD while %d ambient ADDs wait for ztunnel with one ADD slot: %v %v", ambient, resp, err)
	}
	close(zt.up)
	for range ambient {
		if err := <-done; err != nil {
			t.Errorf("an ambient ADD after ztunnel connected: %v", err)
		}
	}
	if n := u.cni.Inflight.Waiting(); n != 0 {
		t.Fatalf("%d ADDs still waiting for a slot", n)
	}
}

// hostZtunnel is what the store's ambient side asks of ztunnel.
type hostZtunnel = interface {
	Add(ctx context.Context, w ztunnel.Workload) error
	Del(ctx context.Context, uid string) error
	AwaitConnection(ctx context.Context, w ztunnel.Workload) error
}
