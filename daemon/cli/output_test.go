package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc"

	sluicev1 "github.com/sluicemesh/sluice/api/sluice/v1"
)

// What a person reads comes out the same every run: no map order.

type statusClients struct {
	sluicev1.CNIClient
	sluicev1.DebugClient
	workloads []*sluicev1.Workload
}

func (c statusClients) Version(context.Context, *sluicev1.VersionRequest, ...grpc.CallOption) (*sluicev1.VersionResponse, error) {
	return &sluicev1.VersionResponse{Version: "test", ApiVersion: 2, MinApiVersion: 1}, nil
}

func (c statusClients) Status(context.Context, *sluicev1.StatusRequest, ...grpc.CallOption) (*sluicev1.StatusResponse, error) {
	return &sluicev1.StatusResponse{Ready: true}, nil
}

func (c statusClients) ListWorkloads(context.Context, *sluicev1.ListWorkloadsRequest, ...grpc.CallOption) (*sluicev1.ListWorkloadsResponse, error) {
	return &sluicev1.ListWorkloadsResponse{Workloads: c.workloads}, nil
}

func (c statusClients) Ztunnel(context.Context, *sluicev1.ZtunnelRequest, ...grpc.CallOption) (*sluicev1.ZtunnelResponse, error) {
	return &sluicev1.ZtunnelResponse{}, nil
}

func TestStatusModeCountsSorted(t *testing.T) {
	c := statusClients{workloads: []*sluicev1.Workload{
		{Mode: sluicev1.Mode_MODE_SIDECAR}, {Mode: sluicev1.Mode_MODE_AMBIENT}, {Mode: sluicev1.Mode_MODE_SIDECAR},
		{Mode: sluicev1.Mode_MODE_UNSPECIFIED},
	}}
	var want string
	for range 20 {
		var out bytes.Buffer
		v, err := getStatus(clients{cni: c, debug: c}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := v.table(&out); err != nil {
			t.Fatal(err)
		}
		line := out.String()[strings.Index(out.String(), "workloads"):]
		if want == "" {
			want = line
			if !strings.Contains(line, "(ambient 1) (sidecar 2)") {
				t.Fatalf("mode counts not sorted: %q", line)
			}
			continue
		}
		if line != want {
			t.Fatalf("status changed between runs: %q, then %q", want, line)
		}
	}
}
