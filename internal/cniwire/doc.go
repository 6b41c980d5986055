// Package cniwire is the sluice.v1 CNI messages (api/sluice/v1/agent.proto,
// service CNI) as plain Go structs with a hand-written protobuf wire codec.
//
// It exists for the plugin: `sluice` is exec'd on every pod start, and
// linking grpc-go's channel and the protobuf runtime (which the generated
// api/sluice/v1 package pulls in) costs milliseconds of package inits per
// exec (the measured numbers live in docs/benchmarks.md). cniwire imports only
// google.golang.org/protobuf/encoding/protowire, the protobuf module's own
// low-level wire API, which has no registry and no reflection.
//
// The types carry the generated code's Go names (AddRequest.ContainerId,
// Mode_MODE_SIDECAR, CNI_Add_FullMethodName, ...) so code switches between the
// two by its import alone. Requests encode (AppendWire), responses decode
// (UnmarshalWire), with protobuf-go's proto3 semantics. The tests hold the
// package to the generated code: differential fuzzing against proto.Marshal
// and proto.Unmarshal, and a walk of the generated descriptors that fails
// when agent.proto gains a field, value or method cniwire does not handle.
package cniwire
