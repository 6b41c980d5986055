package rpc

import (
	"context"
	"fmt"
	"slices"
	"strings"

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
	// ExcludeNamespaces are never captured (--exclude-namespaces). The
	// Kubernetes policy applies them itself; the plugin applies them before
	// it calls the agent, so Explain must say so in standalone mode too.
	ExcludeNamespaces []string
	// ZDS is the ZDS server when the agent runs with --ambient, nil
	// otherwise; ZtunnelSocket is its path.
	ZDS           ZtunnelLink
	ZtunnelSocket string
}

// Ztunnel says whether ztunnel is connected: with none, ambient ADDs fail
// while the agent itself is up, and an operator needs to tell the two apart.
func (d *Debug) Ztunnel(context.Context, *sluicev1.ZtunnelRequest) (*sluicev1.ZtunnelResponse, error) {
	if d.ZDS == nil {
		return &sluicev1.ZtunnelResponse{}, nil
	}
	ready, why := d.ZDS.Ready()
	return &sluicev1.ZtunnelResponse{Ambient: true, Socket: d.ZtunnelSocket,
		Connections: int32(d.ZDS.Connections()), Ready: ready, Reason: why}, nil
}

func (d *Debug) ListWorkloads(context.Context, *sluicev1.ListWorkloadsRequest) (*sluicev1.ListWorkloadsResponse, error) {
	resp := &sluicev1.ListWorkloadsResponse{}
	for _, r := range d.Workloads.List() {
		resp.Workloads = append(resp.Workloads, workloadOf(r))
	}
	return resp, nil
}

func (d *Debug) GetWorkload(_ context.Context, req *sluicev1.GetWorkloadRequest) (*sluicev1.GetWorkloadResponse, error) {
	r, err := d.find(req)
	if err != nil {
		return nil, err
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

// find picks the one record a GetWorkloadRequest names: by pod, or by a
// container id or a prefix of one (what `sluice-agent workloads` prints).
// Several matches are an error that lists them, never a guess.
func (d *Debug) find(req *sluicev1.GetWorkloadRequest) (workloads.Record, error) {
	pod := req.GetPod()
	byPod := pod.GetName() != "" || pod.GetUid() != ""
	if byPod == (req.ContainerId != "") {
		return workloads.Record{}, status.Error(codes.InvalidArgument, "name a workload by container_id (or a prefix of it) or by pod, not both or neither")
	}
	var hits []workloads.Record
	for _, r := range d.Workloads.List() {
		if req.IfName != "" && r.IfName != req.IfName {
			continue
		}
		if byPod && matchesPod(r, pod) || !byPod && strings.HasPrefix(r.ContainerID, req.ContainerId) {
			hits = append(hits, r)
		}
	}
	what := fmt.Sprintf("container %q", req.ContainerId)
	if byPod {
		what = fmt.Sprintf("pod %s/%s", pod.GetNamespace(), pod.GetName())
	}
	if req.IfName != "" {
		what += fmt.Sprintf(" if_name %q", req.IfName)
	}
	switch len(hits) {
	case 0:
		return workloads.Record{}, status.Errorf(codes.NotFound, "no workload for %s", what)
	case 1:
		return hits[0], nil
	}
	var ids []string
	for _, r := range hits {
		ids = append(ids, r.Attachment.String())
	}
	return workloads.Record{}, status.Errorf(codes.FailedPrecondition, "%s matches %d attachments (%s): give a longer container id or an if_name",
		what, len(hits), strings.Join(ids, ", "))
}

func matchesPod(r workloads.Record, p *sluicev1.PodRef) bool {
	if p.GetUid() != "" && r.PodUID != p.GetUid() {
		return false
	}
	if p.GetName() != "" && (r.PodName != p.GetName() || r.PodNamespace != p.GetNamespace()) {
		return false
	}
	return true
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
		w.Ips = append(w.Ips, &sluicev1.IPConfig{Address: ip.String()})
	}
	return w
}

// Explain runs the policy for a pod and renders the ruleset ADD would
// program, touching nothing.
func (d *Debug) Explain(ctx context.Context, req *sluicev1.ExplainRequest) (*sluicev1.ExplainResponse, error) {
	if ns := req.GetPod().GetNamespace(); slices.Contains(d.ExcludeNamespaces, ns) {
		return &sluicev1.ExplainResponse{Reason: "namespace " + ns + " is excluded: the plugin passes its pods through without asking the agent",
			Inputs: []string{"--exclude-namespaces: " + ns}}, nil
	}
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
