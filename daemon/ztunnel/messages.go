package ztunnel

import (
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/sluicemesh/sluice/api/zds"
)

// maxPacket is ztunnel's receive buffer: it refuses a larger packet as
// truncated. Kubernetes' name limits keep a real AddWorkload far below it.
const maxPacket = 1024

func addRequest(w Workload) *zds.WorkloadRequest {
	return &zds.WorkloadRequest{Payload: &zds.WorkloadRequest_Add{Add: &zds.AddWorkload{
		Uid: w.UID,
		WorkloadInfo: &zds.WorkloadInfo{
			Name:           w.Name,
			Namespace:      w.Namespace,
			ServiceAccount: w.ServiceAccount,
		},
	}}}
}

func keepRequest(uid string) *zds.WorkloadRequest {
	return &zds.WorkloadRequest{Payload: &zds.WorkloadRequest_Keep{Keep: &zds.KeepWorkload{Uid: uid}}}
}

func delRequest(uid string) *zds.WorkloadRequest {
	return &zds.WorkloadRequest{Payload: &zds.WorkloadRequest_Del{Del: &zds.DelWorkload{Uid: uid}}}
}

func snapshotSentRequest() *zds.WorkloadRequest {
	return &zds.WorkloadRequest{Payload: &zds.WorkloadRequest_SnapshotSent{SnapshotSent: &zds.SnapshotSent{}}}
}

// encode marshals req, refusing what ztunnel could not read before anything
// is written, so an oversized request fails alone instead of costing the
// connection.
func encode(req *zds.WorkloadRequest) ([]byte, error) {
	data, err := proto.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("encode ZDS request: %w", err)
	}
	if len(data) > maxPacket {
		return nil, fmt.Errorf("ZDS request is %d bytes; ztunnel reads at most %d", len(data), maxPacket)
	}
	return data, nil
}
