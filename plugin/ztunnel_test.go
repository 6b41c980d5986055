package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/sluicemesh/sluice/daemon/redirect"
	"github.com/sluicemesh/sluice/daemon/redirect/redirecttest"
	"github.com/sluicemesh/sluice/daemon/workloads"
	"github.com/sluicemesh/sluice/daemon/ztunnel"
)

// absentZtunnel is a ZDS server no ztunnel has connected to.
type absentZtunnel struct{}

func (absentZtunnel) Add(_ context.Context, w ztunnel.Workload) error {
	return fmt.Errorf("add workload %s to ztunnel: %w", w.UID, ztunnel.ErrNotConnected)
}
func (absentZtunnel) Del(context.Context, string) error { return nil }

// AwaitConnection does not wait: none is configured.
func (absentZtunnel) AwaitConnection(context.Context, ztunnel.Workload) error { return nil }

// With the agent up and no ztunnel, an ambient ADD is retried (11) and the
// error names ztunnel: it must not say the agent is not available, which
// sends an operator to a healthy agent.
func TestVerbAddNoZtunnelBlamesZtunnel(t *testing.T) {
	a := startAgentWith(t, redirect.DefaultAmbientSpec(), func(ns *redirecttest.Namespaces) *workloads.Ambient {
		ns.Add("/host")
		h, err := ns.Open("/host")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.Close() })
		return &workloads.Ambient{Ztunnel: absentZtunnel{}, Host: h}
	})
	a.ns.Add("/netns/c1")
	_, err := stdoutOf(t, func() error { return cmdAdd(cmdArgs(t, a.sock, "c1", "default", nil)) })
	if cniCode(t, err) != types.ErrTryAgainLater {
		t.Fatalf("ambient ADD with no ztunnel: %v, want code 11", err)
	}
	msg := err.Error()
	if strings.Contains(msg, "not available") || !strings.Contains(msg, "no ztunnel is connected") || !strings.Contains(msg, a.sock) {
		t.Fatalf("ambient ADD with no ztunnel: %q; want it to name ztunnel as the cause and the agent's socket, not call the agent unavailable", msg)
	}
}

// The plugin's log names modes as the agent and the CLI do.
func TestVerbAddLogsModeAsTheAgentNamesIt(t *testing.T) {
	a := startAgent(t)
	a.ns.Add("/netns/c1")
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	saved := os.Stderr
	os.Stderr = w
	_, addErr := stdoutOf(t, func() error {
		return cmdAdd(cmdArgs(t, a.sock, "c1", "default", map[string]any{"logLevel": "info"}))
	})
	os.Stderr = saved
	w.Close()
	logged, _ := io.ReadAll(r)
	if addErr != nil {
		t.Fatal(addErr)
	}
	if !strings.Contains(string(logged), "mode=sidecar") || strings.Contains(string(logged), "MODE_") {
		t.Fatalf("plugin log:\n%s\nwant mode=sidecar", logged)
	}
}
