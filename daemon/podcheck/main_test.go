package podcheck

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/sluicemesh/sluice/test/harness/podtest"
)

// The tests here drive the Checker against test/harness/kubetest's API server
// (podtest): a pod's event in, a job's action and Event out, as the agent's
// user bound to its shipped ClusterRole.

func TestMain(m *testing.M) {
	code := m.Run()
	podtest.Stop()
	os.Exit(code)
}

// runRepair runs a Checker in mode until t ends. checked receives the key
// of every pod it has finished checking.
func runRepair(t *testing.T, a *podtest.Parts, mode string) (r *Checker, checked <-chan string) {
	t.Helper()
	return runRepairWith(t, a, func(c *Config) { c.Mode = mode })
}

// runRepairWith is runRepair with the Config set by set.
func runRepairWith(t *testing.T, a *podtest.Parts, set func(*Config)) (r *Checker, checked <-chan string) {
	t.Helper()
	cfg := Config{Policy: a.Policy, Pods: a.Cache.Pods, Namespaces: a.Cache.Namespaces, Store: a.Store, Client: a.Client, Events: a.Events,
		HostProc: "/proc", NodeName: a.Node, Log: podtest.Log(t)}
	set(&cfg)
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan string, 100)
	r.onChecked = func(key string) {
		select {
		case ch <- key:
		default:
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return r, ch
}

func waitSwept(t *testing.T, r *Checker) {
	t.Helper()
	select {
	case <-r.swept:
	case <-time.After(30 * time.Second):
		t.Fatal("the checker never finished its sweep at start")
	}
}

func waitChecked(t *testing.T, checked <-chan string, key string) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case k := <-checked:
			if k == key {
				return
			}
		case <-deadline:
			t.Fatalf("the checker never checked %s", key)
		}
	}
}
