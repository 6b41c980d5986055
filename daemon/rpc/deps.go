package rpc

import (
	"context"

	"github.com/sluicemesh/sluice/daemon/events"
	"github.com/sluicemesh/sluice/daemon/redirect"
	"github.com/sluicemesh/sluice/daemon/workloads"
)

// What the services need of the parts below them, each the narrowest
// interface that does: *workloads.Store and *events.Recorder in the agent,
// fakes or a Store over redirecttest's kernel in the tests.

// Workloads is what CNI asks of the enrolled-workload store.
type Workloads interface {
	// EnrollAmbient is the ambient owner's (ambientmesh.Store): rpc
	// enrols only sidecar pods itself (Enroll).
	EnrollAmbient(ctx context.Context, r workloads.Record, wait bool) error
	AwaitZtunnel(ctx context.Context, r workloads.Record) error
	Enroll(ctx context.Context, r workloads.Record) error
	Get(a workloads.Attachment) (workloads.Record, bool)
	PodEnrolled(podUID string) bool
	Release(ctx context.Context, a workloads.Attachment, netnsPath string) error
	Check(ctx context.Context, a workloads.Attachment, netnsPath string, spec redirect.Spec) ([]string, error)
	GC(ctx context.Context, network string, valid []workloads.Attachment) ([]workloads.Attachment, error)
}

// Inventory is what Debug reads of the enrolled-workload store.
type Inventory interface {
	List() []workloads.Record
	Get(a workloads.Attachment) (workloads.Record, bool)
	Verify(r workloads.Record) ([]string, error)
}

// EventSink records Events on pods (events.Recorder).
type EventSink interface {
	CaptureFailed(pod events.PodRef, sb events.Sandbox, err error)
}

// ZtunnelLink is what Debug reads of the ZDS server (ztunnel.Server; the
// agent asserts it: rpc does not import ztunnel).
type ZtunnelLink interface {
	Connections() int
	Ready() (bool, string)
}

var (
	_ Workloads = (*workloads.Store)(nil)
	_ Inventory = (*workloads.Store)(nil)
)
