// Package ambientmesh owns ambient enrolment: the one place that knows its
// order and its rollback (Mesh), and the node side it runs on (Node, built
// once by NewNode): the host netns, the host probe table with its SNAT
// rule on the kubelet's uid (internal/hostprobe), the pod addresses the
// API server reports fed to that table, the ZDS server ztunnel connects
// to, and the redirection annotator. rpc's ADD, ambientpods' live
// enrolment and istioadopt's adoption call the Mesh; nothing else writes
// the redirection annotation or serves ZDS, and nothing else in the
// running agent writes the host table's rules (the store keeps the pods'
// addresses in its sets, and has the Node write the table again when
// someone deleted it). Istio's node agent holds the same order in one
// function (AddPodToMesh in cni/pkg/nodeagent, "ordering is important").
// A new step goes into Add or Remove here, with its reason below; a step
// that must share the attachment's lock and rollback goes into the
// store's handOver or takeBack (workloads/ambient.go), named in step 2.
// The node's own order (what it builds, and how it stops) is Node's.
//
// Add's order, and why it is this one:
//
//  1. With Wait, a ztunnel to hand the pod to (ztunnel.Server's
//     AwaitConnection), before any lock: a CNI ADD meeting a ztunnel
//     restart waits for it within its deadline rather than fail into the
//     kubelet's backoff; a DEL needs the locks. The CNI ADD waits first
//     through Await, with its ADD slot given back (a rebooted node's
//     ambient pods all wait at once; sidecar pods need the slots). A
//     hand-over that then finds the connection dead is rolled back and
//     waits once more.
//  2. The in-pod rules, then the pod's probe addresses in the host table,
//     then ztunnel's ack, under the attachment's lock, journaled first.
//     Steps 1 and 2 are workloads.Store.EnrollAmbient(ctx, rec, wait): the
//     lock, the journal and the rollback are the store's. Rules before ztunnel,
//     so the netns ztunnel gets already sends it the pod's traffic; probe
//     addresses before ztunnel, as they are harmless without it. All or
//     nothing: an ambient pod without ztunnel is a black hole, so a
//     refusal rolls back to what the attachment had.
//  3. The redirection annotation last: istiod sends a pod HBONE only once
//     it reads "enabled", which must never name a pod ztunnel does not
//     hold. A refusal marks it "pending", but only when nothing of the
//     pod stays captured (a refused re-ADD keeps its capture, and
//     "pending" would have istiod send a captured pod plain text).
//
// With Wait (the CNI ADD) an annotation the API server refuses fails the
// call, as Istio's does, and a fresh enrolment is rolled back (Release):
// running, the pod would be a Ready endpoint istiod sends plain text.
// Without it (background callers, which retry through their queues) the
// Annotator retries the annotation until it sticks.
package ambientmesh

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"k8s.io/client-go/kubernetes"

	"github.com/sluicemesh/sluice/daemon/policy"
	"github.com/sluicemesh/sluice/daemon/redirection"
	"github.com/sluicemesh/sluice/daemon/workloads"
	"github.com/sluicemesh/sluice/daemon/ztunnel"
)

// Wait says whether Add waits for a ztunnel and answers only once istiod
// is told: the CNI ADD's, which the kubelet retries only after its
// backoff.
type Wait bool

const (
	// WaitForZtunnel is the CNI ADD's.
	WaitForZtunnel Wait = true
	// NoWait is a background enrolment's, retried through its queue.
	NoWait Wait = false
)

// ErrZtunnel is wrapped when ztunnel did not take the pod.
var ErrZtunnel = workloads.ErrZtunnel

// ErrNotConnected is wrapped when no ztunnel was connected to take it:
// routine during a ztunnel restart, so worth the runtime's retry.
var ErrNotConnected = ztunnel.ErrNotConnected

// ErrNotTold is wrapped when the pod is captured but istiod cannot be told
// (the API server did not take the annotation): worth a retry.
var ErrNotTold = errors.New("the ambient pod is captured, but istiod cannot be told (the API server did not take the redirection annotation)")

// Store is what enrolment needs of the enrolled-workload store
// (*workloads.Store).
type Store interface {
	AwaitZtunnel(ctx context.Context, r workloads.Record) error
	EnrollAmbient(ctx context.Context, r workloads.Record, wait bool) error
	Get(a workloads.Attachment) (workloads.Record, bool)
	PodEnrolled(podUID string) bool
	Release(ctx context.Context, a workloads.Attachment, netnsPath string) error
}

// Annotator sets ambient.istio.io/redirection ("" removes it)
// (redirection.Annotator): Set retries on its own, Apply tries once and
// says.
type Annotator interface {
	Set(ctx context.Context, pod policy.Pod, value string)
	Apply(ctx context.Context, pod policy.Pod, value string) error
}

var _ Store = (*workloads.Store)(nil)

// Mesh enrols ambient pods. Store is required; a nil Redirection (a nil
// *redirection.Annotator included) marks nothing (standalone).
type Mesh struct {
	Store       Store
	Redirection Annotator
	annotator   *redirection.Annotator // what Run runs; set by New
}

// New builds the node's Mesh over store, with the annotator over client
// (nil: standalone, nothing is marked).
func New(store *workloads.Store, client kubernetes.Interface, log *slog.Logger) *Mesh {
	m := &Mesh{Store: store}
	if client != nil {
		m.annotator = redirection.New(client, log)
		m.Redirection = m.annotator
	}
	return m
}

// Run retries the annotations that failed, until ctx ends.
func (m *Mesh) Run(ctx context.Context) {
	if m.annotator != nil {
		m.annotator.Run(ctx)
	}
}

// Await waits until a ztunnel is connected for rec, an ambient attachment
// of pod, taking no lock: a CNI ADD calls it before it takes one of the
// agent's ADD slots, so that a rebooted node's ambient pods, all waiting
// for ztunnel at once, neither hold the slots sidecar and plain pods need
// nor fail at once past a bound. Add waits again (holding its slot) only
// if ztunnel went away in between. When none comes, pod is marked
// pending as Add's failure would.
func (m *Mesh) Await(ctx context.Context, pod policy.Pod, rec workloads.Record) error {
	if err := m.Store.AwaitZtunnel(ctx, rec); err != nil {
		if pod.UID == "" || !m.Store.PodEnrolled(pod.UID) {
			m.Mark(ctx, pod, "pending")
		}
		return err
	}
	return nil
}

// Add enrols rec, an ambient attachment of pod, in the order the package
// doc gives; a failure leaves the pod as it was before the call.
func (m *Mesh) Add(ctx context.Context, pod policy.Pod, rec workloads.Record, wait Wait) error {
	_, had := m.Store.Get(rec.Attachment)
	if err := m.Store.EnrollAmbient(ctx, rec, bool(wait)); err != nil {
		if errors.Is(err, ErrZtunnel) && (pod.UID == "" || !m.Store.PodEnrolled(pod.UID)) {
			m.Mark(ctx, pod, "pending")
		}
		return err
	}
	if !wait {
		m.Mark(ctx, pod, "enabled")
		return nil
	}
	err := m.apply(ctx, pod, "enabled")
	if err == nil {
		return nil
	}
	err = fmt.Errorf("%w: %w", ErrNotTold, err)
	if !had {
		// A retried ADD's earlier enrolment stays for the runtime's DEL.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
		defer cancel()
		if rerr := m.Store.Release(rctx, rec.Attachment, rec.Netns); rerr != nil {
			err = errors.Join(err, fmt.Errorf("rolling the enrolment back: %w", rerr))
		}
	}
	return err
}

// rollbackTimeout bounds undoing an enrolment whose ADD fails late.
const rollbackTimeout = 5 * time.Second

// Remove takes pod out of the mesh: its attachments recs are released
// (rules, probe addresses, and ztunnel's hold with the last), then the
// annotation goes, when marked says the pod has it.
func (m *Mesh) Remove(ctx context.Context, pod policy.Pod, recs []workloads.Record, marked bool) error {
	var errs []error
	for _, rec := range recs {
		errs = append(errs, m.Store.Release(ctx, rec.Attachment, ""))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if marked {
		m.Mark(ctx, pod, "")
	}
	return nil
}

// Mark sets the annotation to value ("" removes it), retried until it
// sticks: for a pod enrolled already (adopted, or found unmarked).
// A nil Mesh marks nothing.
func (m *Mesh) Mark(ctx context.Context, pod policy.Pod, value string) {
	if m == nil || m.Redirection == nil {
		return
	}
	ctx, span := tracer.Start(ctx, "redirection.annotate")
	span.SetAttributes(attribute.String("sluice.redirection", value))
	m.Redirection.Set(ctx, pod, value)
	span.End()
}

func (m *Mesh) apply(ctx context.Context, pod policy.Pod, value string) error {
	if m.Redirection == nil {
		return nil
	}
	ctx, span := tracer.Start(ctx, "redirection.annotate")
	span.SetAttributes(attribute.String("sluice.redirection", value))
	err := m.Redirection.Apply(ctx, pod, value)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
	return err
}

// tracer is the global provider's (daemon/tracing sets it).
var tracer = otel.Tracer("github.com/sluicemesh/sluice/daemon/ambientmesh")
