package rpc

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sluicev1 "github.com/sluicemesh/sluice/api/sluice/v1"
	"github.com/sluicemesh/sluice/daemon/redirect"
	"github.com/sluicemesh/sluice/daemon/workloads"
	"github.com/sluicemesh/sluice/internal/buildinfo"
)

// Debug implements sluice.v1.Debug, for operators with grpcurl.
type Debug struct {
	sluicev1.UnimplementedDebugServer
	Workloads Inventory
	Policy    Policy
}

func (d *Debug) ListWorkloads(context.Context, *sluicev1.ListWorkloadsRequest) (*sluicev1.ListWorkloadsResponse, error) {
	resp := &sluicev1.ListWorkloadsResponse{}
	for _, r := range d.Workloads.List() {
		resp.Workloads = append(resp.Workloads, workloadOf(r))
	}
	return resp, nil
}

func (d *Debug) GetWorkload(_ context.Context, req *sluicev1.GetWorkloadRequest) (*sluicev1.GetWorkloadResponse, error) {
	r, ok := d.Workloads.Get(workloads.Attachment{ContainerID: req.ContainerId, IfName: req.IfName})
	if !ok {
		return nil, status.Errorf(codes.NotFound, "no workload for container %q if_name %q", req.ContainerId, req.IfName)
	}
	rs, err := redirect.Build(r.Spec)
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	resp := &sluicev1.GetWorkloadResponse{Workload: workloadOf(r), Ruleset: rs.Render()}
	drift, err := d.Workloads.Verify(r)
	if err != nil {
		resp.Drift = []string{"verify failed: " + err.Error()}
	} else {
		resp.Drift = drift
	}
	return resp, nil
}

func (d *Debug) Version(context.Context, *sluicev1.VersionRequest) (*sluicev1.VersionResponse, error) {
	return &sluicev1.VersionResponse{Version: buildinfo.Version, ApiVersion: apiVersion, MinApiVersion: minAPIVersion}, nil
}

func workloadOf(r workloads.Record) *sluicev1.Workload {
	w := &sluicev1.Workload{
		ContainerId:  r.ContainerID,
		IfName:       r.IfName,
		Pod:          &sluicev1.PodRef{Namespace: r.PodNamespace, Name: r.PodName, Uid: r.PodUID},
		Netns:        r.Netns,
		Mode:         modeOf(r.Spec.Mode),
		RulesetHash:  r.RulesetHash,
		EnrolledUnix: r.EnrolledAt.Unix(),
	}
	for _, ip := range r.IPs {
		w.Ips = append(w.Ips, &sluicev1.IPConfig{Address: ip})
	}
	return w
}

// Explain runs the policy for a pod and renders the ruleset ADD would
// program, touching nothing.
func (d *Debug) Explain(ctx context.Context, req *sluicev1.ExplainRequest) (*sluicev1.ExplainResponse, error) {
	dec, err := d.Policy.Decide(ctx, podOf(req.Pod, nil))
	if err != nil {
		return nil, toStatus(err)
	}
	resp := &sluicev1.ExplainResponse{Capture: dec.Capture, Reason: dec.Reason, Inputs: dec.Inputs}
	if !dec.Capture {
		return resp, nil
	}
	rs, err := redirect.Build(dec.Spec)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	resp.Mode = modeOf(dec.Spec.Mode)
	resp.Ruleset = rs.Render()
	return resp, nil
}
