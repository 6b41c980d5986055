package zds

import (
	"encoding/hex"
	"testing"

	"google.golang.org/protobuf/proto"
)

// The hex was written by hand from ztunnel's field numbers (tag byte =
// field<<3 | wire type), not produced by this package, so a renumbered field
// or a changed oneof fails here before it fails against a real ztunnel.
var goldens = []struct {
	name string
	msg  proto.Message
	hex  string
}{
	{"hello v1", &ZdsHello{Version: Version_V1}, "0801"},
	{"workload info", &WorkloadInfo{Name: "n", Namespace: "ns", ServiceAccount: "sa"}, "0a016e12026e731a027361"},
	{"add", &AddWorkload{Uid: "u", WorkloadInfo: &WorkloadInfo{Name: "n"}}, "0a017512030a016e"},
	{"keep", &KeepWorkload{Uid: "x"}, "0a0178"},
	{"del uid is field 2", &DelWorkload{Uid: "a"}, "120161"},
	{"snapshot sent", &SnapshotSent{}, ""},
	{"ack error", &Ack{Error: "e"}, "0a0165"},
	{"request add", &WorkloadRequest{Payload: &WorkloadRequest_Add{Add: &AddWorkload{Uid: "u"}}}, "0a030a0175"},
	{"request del", &WorkloadRequest{Payload: &WorkloadRequest_Del{Del: &DelWorkload{Uid: "a"}}}, "1203120161"},
	{"request snapshot sent", &WorkloadRequest{Payload: &WorkloadRequest_SnapshotSent{SnapshotSent: &SnapshotSent{}}}, "1a00"},
	{"request keep", &WorkloadRequest{Payload: &WorkloadRequest_Keep{Keep: &KeepWorkload{Uid: "x"}}}, "2a030a0178"},
	{"response ack ok", &WorkloadResponse{Payload: &WorkloadResponse_Ack{Ack: &Ack{}}}, "0a00"},
	{"response ack error", &WorkloadResponse{Payload: &WorkloadResponse_Ack{Ack: &Ack{Error: "e"}}}, "0a030a0165"},
}

func TestWireGoldens(t *testing.T) {
	for _, g := range goldens {
		t.Run(g.name, func(t *testing.T) {
			got, err := proto.MarshalOptions{Deterministic: true}.Marshal(g.msg)
			if err != nil {
				t.Fatalf("marshal: %v", err)
			}
			if h := hex.EncodeToString(got); h != g.hex {
				t.Errorf("encoded %s, want %s", h, g.hex)
			}
			raw, err := hex.DecodeString(g.hex)
			if err != nil {
				t.Fatal(err)
			}
			back := g.msg.ProtoReflect().New().Interface()
			if err := proto.Unmarshal(raw, back); err != nil {
				t.Fatalf("unmarshal %s: %v", g.hex, err)
			}
			if !proto.Equal(back, g.msg) {
				t.Errorf("decoded %v, want %v", back, g.msg)
			}
		})
	}
}

// ztunnel's prost code does not look at names on the wire, but Istio's Go
// agent and debugging tools do; the package is part of the contract.
func TestPackageName(t *testing.T) {
	if got := (&WorkloadRequest{}).ProtoReflect().Descriptor().FullName(); got != "istio.workload.zds.WorkloadRequest" {
		t.Errorf("full name %s", got)
	}
}
