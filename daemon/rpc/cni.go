// Package rpc serves the sluice.v1 gRPC API on the agent's unix socket. It
// validates requests, asks policy what a pod gets, and hands the work to
// workloads, an ambient pod's to ambientmesh (which owns the ztunnel wait,
// the hand-over's order and the redirection annotation; rpc does not
// import ztunnel); it keeps no state and no logic of its own.
//
// The socket is the agent's most exposed door, so its walls are here. The
// socket's mode (0600 in a 0700 dir) is the first; the peer's uid is read
// from SO_PEERCRED at the handshake (peercred.go), so a refused peer never
// gets an HTTP/2 transport, stream or goroutine and sees Unavailable;
// refusals are counted and logged at most once a second, and an
// interceptor checks every method again, health and reflection included.
// The server's bounds are constants, not flags (server.go, listen.go): 1
// MiB a request, 16 streams a connection, 256 connections (more wait in
// the backlog under the caller's deadline), a 64 KiB header list, fixed
// flow-control windows (64 KiB a stream, 1 MiB a connection), connections
// closed after 2 min (+70 s grace) or 1 min idle, 4 KiB transport buffers
// (every plugin exec is one small call on a new connection) and
// max(8, 2×NumCPU) stream workers, whose stacks stay grown between calls.
package rpc

import (
	"context"
	"errors"
	"net/netip"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sluicev1 "github.com/sluicemesh/sluice/api/sluice/v1"
	"github.com/sluicemesh/sluice/daemon/ambientmesh"
	"github.com/sluicemesh/sluice/daemon/events"
	"github.com/sluicemesh/sluice/daemon/podns"
	"github.com/sluicemesh/sluice/daemon/policy"
	"github.com/sluicemesh/sluice/daemon/redirect"
	"github.com/sluicemesh/sluice/daemon/workloads"
)

// Policy decides what a pod gets.
type Policy interface {
	Decide(ctx context.Context, pod policy.Pod) (policy.Decision, error)
}

// Readiness reports whether the agent can take pods, and why not.
type Readiness func() (bool, string)

// CNI implements sluice.v1.CNI.
type CNI struct {
	sluicev1.UnimplementedCNIServer
	Policy    Policy
	Workloads Workloads
	Ready     Readiness
	Inflight  *Inflight
	Events    EventSink // nil records nothing (standalone)
	// Ambient enrols ambient pods (ambientmesh owns the order: rules,
	// probe addresses, ztunnel's ack, the redirection annotation); nil
	// enrols them over Workloads and marks nothing (standalone).
	Ambient *ambientmesh.Mesh
	// Decisions logs each ADD's outcome and counts pass-throughs; nil logs
	// nothing.
	Decisions *events.Decisions
	// Addrs reads a pod's addresses from its netns when the runtime gave
	// none (podns.Opener); nil leaves them to the pod's status.
	Addrs NetnsAddrs
}

// NetnsAddrs lists the addresses a pod's netns holds (podns.Opener.Addrs).
type NetnsAddrs interface {
	Addrs(ctx context.Context, netnsPath string) ([]netip.Prefix, error)
}

func (s *CNI) Add(ctx context.Context, req *sluicev1.AddRequest) (*sluicev1.AddResponse, error) {
	a, ips, err := checkRequest(req.ApiVersion, req.ContainerId, req.IfName, req.Ips, req.RequestId)
	if err != nil {
		return nil, err
	}
	release, err := s.Inflight.acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { release() }() // the slot held when Add returns
	ips = s.netnsAddrs(ctx, req.Netns, ips)
	pod := podOf(req.Pod, ips)
	d, err := s.decide(ctx, pod)
	defer func() { s.Decisions.Added(pod, req.ContainerId, req.RequestId, d, err) }()
	if err != nil {
		s.captureFailed(pod, req, err)
		return nil, withRequestID(toStatus(err), req.RequestId)
	}
	if !d.Capture {
		return &sluicev1.AddResponse{Enrolled: false, Reason: d.Reason}, nil
	}
	rec := workloads.Record{
		Attachment:     a,
		PodNamespace:   pod.Namespace,
		PodName:        pod.Name,
		PodUID:         pod.UID,
		Network:        req.Config.GetNetworkName(),
		Netns:          req.Netns,
		Spec:           d.Spec,
		ServiceAccount: d.ServiceAccount,
		IPs:            ips,
	}
	if d.Spec.Mode == redirect.ModeAmbient {
		// An ambient pod that meets a ztunnel restart waits for it within
		// the deadline, rather than fail into the kubelet's backoff, and
		// gives its ADD slot back while it waits.
		if release, err = s.awaitZtunnel(ctx, pod, rec, release); err == nil {
			err = s.mesh().Add(ctx, pod, rec, ambientmesh.WaitForZtunnel)
		}
	} else {
		err = s.Workloads.Enroll(ctx, rec)
	}
	if err != nil {
		s.captureFailed(pod, req, err)
		if errors.Is(err, ambientmesh.ErrNotTold) {
			return nil, withRequestID(status.Error(codes.Unavailable, err.Error()), req.RequestId)
		}
		return nil, withRequestID(toStatus(err), req.RequestId)
	}
	return &sluicev1.AddResponse{Enrolled: true, Mode: modeOf(d.Spec.Mode), Reason: d.Reason}, nil
}

func (s *CNI) Del(ctx context.Context, req *sluicev1.DelRequest) (*sluicev1.DelResponse, error) {
	if err := checkAPIVersion(req.ApiVersion); err != nil {
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	}
	a, err := checkAttachment(req.ContainerId, req.IfName)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if err := s.Workloads.Release(ctx, a, req.Netns); err != nil {
		return nil, toStatus(err)
	}
	return &sluicev1.DelResponse{}, nil
}

func (s *CNI) Check(ctx context.Context, req *sluicev1.CheckRequest) (*sluicev1.CheckResponse, error) {
	a, ips, err := checkRequest(req.ApiVersion, req.ContainerId, req.IfName, req.Ips, "")
	if err != nil {
		return nil, err
	}
	d, err := s.decide(ctx, podOf(req.Pod, s.netnsAddrs(ctx, req.Netns, ips)))
	if err != nil {
		return nil, toStatus(err)
	}
	if !d.Capture {
		return &sluicev1.CheckResponse{}, nil
	}
	drift, err := s.Workloads.Check(ctx, a, req.Netns, d.Spec)
	if err != nil {
		return nil, toStatus(err)
	}
	return &sluicev1.CheckResponse{Drift: drift}, nil
}

func (s *CNI) Status(ctx context.Context, req *sluicev1.StatusRequest) (*sluicev1.StatusResponse, error) {
	if err := checkAPIVersion(req.ApiVersion); err != nil {
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	}
	ready, why := s.Ready()
	return &sluicev1.StatusResponse{Ready: ready, Reason: why}, nil
}

func (s *CNI) GC(ctx context.Context, req *sluicev1.GCRequest) (*sluicev1.GCResponse, error) {
	if err := checkAPIVersion(req.ApiVersion); err != nil {
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	}
	if !req.ValidAttachmentsPresent && len(req.ValidAttachments) == 0 {
		// Without the key every attachment would look stale: refuse, remove nothing.
		return nil, status.Error(codes.InvalidArgument, "GC without cni.dev/valid-attachments: refused, nothing removed")
	}
	network := req.Config.GetNetworkName()
	if network == "" {
		return nil, status.Error(codes.InvalidArgument, "GC without a network name: refused, nothing removed (GC is scoped to the calling network)")
	}
	valid := make([]workloads.Attachment, 0, len(req.ValidAttachments))
	for _, v := range req.ValidAttachments {
		valid = append(valid, workloads.Attachment{ContainerID: v.ContainerId, IfName: v.IfName})
	}
	removed, err := s.Workloads.GC(ctx, network, valid)
	resp := &sluicev1.GCResponse{}
	for _, a := range removed {
		resp.Removed = append(resp.Removed, &sluicev1.Attachment{ContainerId: a.ContainerID, IfName: a.IfName})
	}
	if err != nil {
		return resp, toStatus(err)
	}
	return resp, nil
}

func (s *CNI) captureFailed(pod policy.Pod, req *sluicev1.AddRequest, err error) {
	if s.Events != nil {
		s.Events.CaptureFailed(events.PodRef{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID},
			events.Sandbox{ID: req.ContainerId, Netns: req.Netns}, err)
	}
}

// mesh is the ambient owner: Ambient, or one over Workloads that marks
// nothing.
// awaitZtunnel waits for a ztunnel for an ambient pod's ADD with its slot
// given back (release), then takes a slot again: a rebooted node re-creates
// its ambient pods before ztunnel is back, and they must neither fill the
// slots (--max-inflight) that sidecar and plain pods' ADDs need nor be
// refused past a bound. It returns the release of the slot it holds, a
// no-op when it holds none.
func (s *CNI) awaitZtunnel(ctx context.Context, pod policy.Pod, rec workloads.Record, release func()) (func(), error) {
	release()
	if err := s.mesh().Await(ctx, pod, rec); err != nil {
		return func() {}, err
	}
	again, err := s.Inflight.acquire(ctx)
	if err != nil {
		return func() {}, err
	}
	return again, nil
}

func (s *CNI) mesh() *ambientmesh.Mesh {
	if s.Ambient != nil {
		return s.Ambient
	}
	return &ambientmesh.Mesh{Store: s.Workloads}
}

// decide is Policy.Decide as a step of the call's trace; the call's own
// span gets the mode decided too (sluice.mode: sidecar, ambient, or
// passthrough for a pod left alone).
func (s *CNI) decide(ctx context.Context, pod policy.Pod) (policy.Decision, error) {
	dctx, span := startSpan(ctx, "policy.decide")
	d, err := s.Policy.Decide(dctx, pod)
	if err == nil && span.IsRecording() {
		mode := attribute.String("sluice.mode", "passthrough")
		if d.Capture {
			mode = attribute.String("sluice.mode", string(d.Spec.Mode))
		}
		span.SetAttributes(mode)
		trace.SpanFromContext(ctx).SetAttributes(mode)
	}
	endSpan(span, err)
	return d, err
}

// netnsAddrs are ips, or when the runtime gave none (no prevResult: an own
// conflist under Multus, a CNI call chained after nothing), the addresses
// the pod's netns holds: the pod's status has none yet at ADD, and without
// them policy would capture both IP families, and a proxy that listens on
// IPv4 only would refuse every IPv6 connection. istio-iptables reads them
// from the netns too. A netns that cannot be read leaves them empty: the
// enrolment that follows opens it and says why.
func (s *CNI) netnsAddrs(ctx context.Context, netnsPath string, ips []netip.Prefix) []netip.Prefix {
	if len(ips) > 0 || s.Addrs == nil || netnsPath == "" {
		return ips
	}
	got, err := s.Addrs.Addrs(ctx, netnsPath)
	if err != nil {
		return ips
	}
	return got
}

// podOf is the pod the runtime named, with the addresses prevResult gave
// it (policy decides the IP families from them, as Istio does).
func podOf(p *sluicev1.PodRef, ips []netip.Prefix) policy.Pod {
	pod := policy.Pod{Namespace: p.GetNamespace(), Name: p.GetName(), UID: p.GetUid()}
	for _, ip := range ips {
		pod.IPs = append(pod.IPs, ip.Addr())
	}
	return pod
}

// withRequestID ends a refusal's message with the plugin's request id: the
// runtime shows the message in the pod's events, and the id finds the
// agent's log line for the same ADD.
func withRequestID(err error, id string) error {
	if id == "" {
		return err
	}
	st := status.Convert(err)
	return status.Error(st.Code(), st.Message()+" (sluice request_id "+id+")")
}

func modeOf(m redirect.Mode) sluicev1.Mode {
	switch m {
	case redirect.ModeSidecar:
		return sluicev1.Mode_MODE_SIDECAR
	case redirect.ModeAmbient:
		return sluicev1.Mode_MODE_AMBIENT
	}
	return sluicev1.Mode_MODE_UNSPECIFIED
}

// toStatus maps the errors below rpc onto gRPC codes the plugin turns into
// CNI codes: a bad netns path or pod annotation is the caller's fault, a
// missed deadline or a full disk is worth retrying, anything else is ours
// (never InvalidArgument).
func toStatus(err error) error {
	if _, ok := status.FromError(err); ok {
		return err // already a status: no ADD slot again after a ztunnel wait
	}
	var rule *podns.RuleError
	var ann *policy.AnnotationError
	var journal *workloads.JournalError
	switch {
	case errors.As(err, &journal) && journal.Full():
		// A full state dir may drain (records of deleted pods go): retry.
		return status.Error(codes.ResourceExhausted, "the agent's state dir is full: "+err.Error())
	case errors.As(err, &journal):
		// Checked before ErrNotExist: a missing state file is ours, not the caller's.
		return status.Error(codes.Internal, err.Error())
	case errors.As(err, &rule), errors.As(err, &ann):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, policy.ErrPodNotFound):
		return status.Error(codes.NotFound, err.Error())
	case errors.Is(err, ambientmesh.ErrNotConnected):
		// ztunnel restarts and upgrades are routine: the runtime retries.
		// The cause comes first: the agent is up, ztunnel is not.
		return status.Error(codes.Unavailable, "no ztunnel is connected to the agent, ambient pods wait for one (is ztunnel running on this node?): "+err.Error())
	case errors.Is(err, podns.ErrNotExist):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	}
	return status.Error(codes.Internal, err.Error())
}
