package cniwire_test

import (
	"testing"

	"google.golang.org/protobuf/proto"

	sluicev1 "github.com/sluicemesh/sluice/api/sluice/v1"
	"github.com/sluicemesh/sluice/internal/cniwire"
)

// An ADD as the plugin sends it, for comparing AppendWire with proto.Marshal.
var benchAdd = &sluicev1.AddRequest{ApiVersion: sluicev1.ApiVersion_API_VERSION_2, ContainerId: "3f2a9c1e0b7d4e5f8a6b9c0d1e2f3a4b5c6d7e8f9a0b1c2d3e4f5a6b7c8d9e0f",
	Netns: "/var/run/netns/cni-1b2c3d4e-5f60-7182-93a4-b5c6d7e8f901", IfName: "eth0",
	Pod:       &sluicev1.PodRef{Namespace: "default", Name: "web-7d4b9c8f6-x2x9z", Uid: "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"},
	Ips:       []*sluicev1.IPConfig{{Address: "10.244.1.17/24", Gateway: "10.244.1.1", Interface: "eth0"}},
	Config:    &sluicev1.PluginConfig{CniVersion: "1.1.0", NetworkName: "k8s-pod-network", Raw: []byte(`{"type":"sluice","name":"sluice","cniVersion":"1.1.0"}`)},
	RequestId: "6c1f0e9a2b3d4c5e"}

func BenchmarkAddRequestAppendWire(b *testing.B) {
	m, err := mirrored(&cniwire.AddRequest{}, benchAdd)
	if err != nil {
		b.Fatal(err)
	}
	req := m.(*cniwire.AddRequest)
	buf := make([]byte, 0, 512)
	for b.Loop() {
		if _, err := req.AppendWire(buf[:0]); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAddRequestProtoMarshal(b *testing.B) {
	for b.Loop() {
		if _, err := proto.Marshal(benchAdd); err != nil {
			b.Fatal(err)
		}
	}
}

var benchResp, _ = proto.Marshal(&sluicev1.AddResponse{Enrolled: true, Mode: sluicev1.Mode_MODE_SIDECAR, Reason: "sidecar: istio-injection=enabled"})

func BenchmarkAddResponseUnmarshalWire(b *testing.B) {
	for b.Loop() {
		var m cniwire.AddResponse
		if err := m.UnmarshalWire(benchResp); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAddResponseProtoUnmarshal(b *testing.B) {
	for b.Loop() {
		var m sluicev1.AddResponse
		if err := proto.Unmarshal(benchResp, &m); err != nil {
			b.Fatal(err)
		}
	}
}
