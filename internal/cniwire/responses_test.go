package cniwire_test

import (
	"bytes"
	"reflect"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	sluicev1 "github.com/sluicemesh/sluice/api/sluice/v1"
	"github.com/sluicemesh/sluice/internal/cniwire"
)

// response is what every cniwire response has.
type response interface {
	UnmarshalWire(b []byte) error
}

// checkResponse holds UnmarshalWire to proto.Unmarshal on the same bytes:
// both fail or both succeed, and then every field is equal.
func checkResponse(t *testing.T, b []byte, ours response, gen proto.Message) {
	t.Helper()
	werr := proto.Unmarshal(b, gen)
	err := ours.UnmarshalWire(b)
	if (err == nil) != (werr == nil) {
		t.Fatalf("proto.Unmarshal: %v; UnmarshalWire: %v; input % x", werr, err, b)
	}
	if err != nil {
		return
	}
	want, err := mirrored(ours, gen)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(ours, want) {
		t.Fatalf("input % x\nUnmarshalWire: %+v\nproto.Unmarshal: %+v", b, ours, want)
	}
}

func FuzzAddResponse(f *testing.F) {
	for _, s := range responseSeeds(&sluicev1.AddResponse{Enrolled: true, Mode: sluicev1.Mode_MODE_AMBIENT, Reason: "ambient: namespace label"}) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		checkResponse(t, b, &cniwire.AddResponse{}, &sluicev1.AddResponse{})
	})
}

func FuzzDelResponse(f *testing.F) {
	for _, s := range responseSeeds(&sluicev1.DelResponse{}) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		checkResponse(t, b, &cniwire.DelResponse{}, &sluicev1.DelResponse{})
	})
}

func FuzzCheckResponse(f *testing.F) {
	for _, s := range responseSeeds(&sluicev1.CheckResponse{Drift: []string{"chain output: rule 2 missing", "", "ünïcödé"}}) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		checkResponse(t, b, &cniwire.CheckResponse{}, &sluicev1.CheckResponse{})
	})
}

func FuzzStatusResponse(f *testing.F) {
	for _, s := range responseSeeds(&sluicev1.StatusResponse{Ready: true, Reason: "policy caches not synced"}) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		checkResponse(t, b, &cniwire.StatusResponse{}, &sluicev1.StatusResponse{})
	})
}

func FuzzGCResponse(f *testing.F) {
	removed := []*sluicev1.Attachment{{ContainerId: "c1", IfName: "eth0"}, {}, {ContainerId: "c2"}}
	for _, s := range responseSeeds(&sluicev1.GCResponse{Removed: removed}) {
		f.Add(s)
	}
	// The same troubles one level down, inside an Attachment.
	for _, s := range responseSeeds(&sluicev1.Attachment{ContainerId: "c3", IfName: "net1"}) {
		f.Add(protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		checkResponse(t, b, &cniwire.GCResponse{}, &sluicev1.GCResponse{})
	})
}

// responseSeeds are full's encoding and the ways a peer's bytes can differ
// from it: empty, doubled (last scalar wins, repeated appends), unknown
// fields of every wire type, known numbers with foreign wire types,
// truncations, malformed tags and varints, strings that are not UTF-8, enum
// values past int32, groups nested to protowire's limit and past it.
func responseSeeds(full proto.Message) [][]byte {
	base, err := proto.Marshal(full)
	if err != nil {
		panic(err)
	}
	unknown := unknownFields()
	seeds := [][]byte{nil, base, cat(base, base), cat(unknown, base), cat(base, unknown)}
	for i := range base {
		seeds = append(seeds, base[:i])
	}
	for num := protowire.Number(1); num <= 3; num++ {
		for _, f := range everyWireType(num) {
			seeds = append(seeds, f, cat(base, f)) // after base: a foreign wire type must not clear a field
		}
		seeds = append(seeds,
			protowire.AppendString(protowire.AppendTag(nil, num, protowire.BytesType), "\xff"),
			protowire.AppendVarint(protowire.AppendTag(nil, num, protowire.VarintType), 1<<32|1),
			protowire.AppendVarint(protowire.AppendTag(nil, num, protowire.VarintType), 1<<31),
			protowire.AppendVarint(protowire.AppendTag(nil, num, protowire.VarintType), ^uint64(0)),
			cat(protowire.AppendTag(nil, num, protowire.VarintType), bytes.Repeat([]byte{0xff}, 10), []byte{1}), // overlong
			cat(protowire.AppendTag(nil, num, protowire.VarintType), []byte{0x80, 0x80, 0x00}),                  // not minimal
		)
	}
	return append(seeds, malformedTags()...)
}

func cat(bs ...[]byte) []byte { return bytes.Join(bs, nil) }

// everyWireType is field num once with each wire type, groups included.
func everyWireType(num protowire.Number) [][]byte {
	tag := func(typ protowire.Type) []byte { return protowire.AppendTag(nil, num, typ) }
	return [][]byte{
		protowire.AppendVarint(tag(protowire.VarintType), 300),
		protowire.AppendFixed32(tag(protowire.Fixed32Type), 7),
		protowire.AppendFixed64(tag(protowire.Fixed64Type), 7),
		protowire.AppendString(tag(protowire.BytesType), "abc"),
		cat(tag(protowire.StartGroupType), // a group holding a varint field and an empty group
			protowire.AppendVarint(protowire.AppendTag(nil, num+1, protowire.VarintType), 1),
			protowire.AppendTag(nil, num+2, protowire.StartGroupType), protowire.AppendTag(nil, num+2, protowire.EndGroupType),
			tag(protowire.EndGroupType)),
	}
}

// unknownFields are numbers agent.proto does not use, of every wire type.
func unknownFields() []byte {
	var b []byte
	for _, f := range everyWireType(100) {
		b = append(b, f...)
	}
	return cat(b, protowire.AppendVarint(protowire.AppendTag(nil, protowire.MaxValidNumber, protowire.VarintType), 1))
}

func malformedTags() [][]byte {
	group := func(depth int) []byte {
		start := protowire.AppendTag(nil, 15, protowire.StartGroupType)
		end := protowire.AppendTag(nil, 15, protowire.EndGroupType)
		return cat(bytes.Repeat(start, depth), bytes.Repeat(end, depth))
	}
	return [][]byte{
		{0x00},       // field 0
		{0x08},       // tag without its value
		{0x80},       // truncated tag
		{0x0c},       // end group with no start
		{0x0b, 0x14}, // end group of another field
		{0x0b},       // group never ended
		{0x0e, 0x00}, // wire type 6
		{0x0f, 0x00}, // wire type 7
		cat(protowire.AppendVarint(nil, uint64(protowire.MaxValidNumber+1)<<3), []byte{0}), // number past 2^29-1
		cat(protowire.AppendVarint(nil, uint64(1<<31)<<3), []byte{0}),                      // past int32
		bytes.Repeat([]byte{0xff}, 11),
		{0x1a, 0x05, 'a'}, // length past the end
		{0x1a, 0xff, 0xff, 0xff, 0xff, 0x0f},
		group(protowire.DefaultRecursionLimit),
		group(protowire.DefaultRecursionLimit + 2),
	}
}

// UnmarshalWire replaces, as proto.Unmarshal does, and leaves the message
// alone when it fails.
func TestUnmarshalWireReplaces(t *testing.T) {
	m := cniwire.AddResponse{Enrolled: true, Reason: "stale"}
	if err := m.UnmarshalWire([]byte{0x10, 0x01}); err != nil {
		t.Fatal(err)
	}
	if m != (cniwire.AddResponse{Mode: cniwire.Mode_MODE_SIDECAR}) {
		t.Fatalf("got %+v, want only the mode", m)
	}
	if err := m.UnmarshalWire([]byte{0x08, 0x00, 0x1a, 0x01, 0xff}); err == nil {
		t.Fatal("a reason that is not UTF-8 decoded")
	}
	if m != (cniwire.AddResponse{Mode: cniwire.Mode_MODE_SIDECAR}) {
		t.Fatalf("a failed decode left %+v", m)
	}
}
