package cniwire_test

import (
	"bytes"
	"fmt"
	"reflect"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	sluicev1 "github.com/sluicemesh/sluice/api/sluice/v1"
	"github.com/sluicemesh/sluice/internal/cniwire"
)

// ours is cniwire's type for every message the CNI service reaches.
var ours = map[protoreflect.FullName]any{
	"sluice.v1.AddRequest": &cniwire.AddRequest{}, "sluice.v1.AddResponse": &cniwire.AddResponse{},
	"sluice.v1.DelRequest": &cniwire.DelRequest{}, "sluice.v1.DelResponse": &cniwire.DelResponse{},
	"sluice.v1.CheckRequest": &cniwire.CheckRequest{}, "sluice.v1.CheckResponse": &cniwire.CheckResponse{},
	"sluice.v1.StatusRequest": &cniwire.StatusRequest{}, "sluice.v1.StatusResponse": &cniwire.StatusResponse{},
	"sluice.v1.GCRequest": &cniwire.GCRequest{}, "sluice.v1.GCResponse": &cniwire.GCResponse{},
	"sluice.v1.PodRef": &cniwire.PodRef{}, "sluice.v1.IPConfig": &cniwire.IPConfig{},
	"sluice.v1.PluginConfig": &cniwire.PluginConfig{}, "sluice.v1.Attachment": &cniwire.Attachment{},
}

func cniService() protoreflect.ServiceDescriptor {
	return sluicev1.File_sluice_v1_agent_proto.Services().ByName("CNI")
}

// TestEveryMethodAndMessageIsCovered: a method added to service CNI, or a
// message one of its messages gains, fails here until cniwire has it.
func TestEveryMethodAndMessageIsCovered(t *testing.T) {
	paths := map[string]string{
		sluicev1.CNI_Add_FullMethodName: cniwire.CNI_Add_FullMethodName, sluicev1.CNI_Del_FullMethodName: cniwire.CNI_Del_FullMethodName,
		sluicev1.CNI_Check_FullMethodName: cniwire.CNI_Check_FullMethodName, sluicev1.CNI_Status_FullMethodName: cniwire.CNI_Status_FullMethodName,
		sluicev1.CNI_GC_FullMethodName: cniwire.CNI_GC_FullMethodName,
	}
	methods := cniService().Methods()
	for i := range methods.Len() {
		md := methods.Get(i)
		path := fmt.Sprintf("/%s/%s", cniService().FullName(), md.Name())
		if paths[path] != path {
			t.Errorf("method %s: cniwire has %q", path, paths[path])
		}
		if _, ok := ours[md.Input().FullName()].(request); !ok {
			t.Errorf("%s: cniwire has no request type %s with AppendWire", path, md.Input().FullName())
		}
		if _, ok := ours[md.Output().FullName()].(response); !ok {
			t.Errorf("%s: cniwire has no response type %s with UnmarshalWire", path, md.Output().FullName())
		}
	}
	if methods.Len() != len(paths) {
		t.Errorf("service CNI has %d methods, cniwire names %d", methods.Len(), len(paths))
	}
	for name := range ours {
		if _, err := protoregistry.GlobalTypes.FindMessageByName(name); err != nil {
			t.Errorf("cniwire has %s: %v", name, err)
		}
	}
}

// TestEveryFieldIsCovered sets every field of every CNI request and
// response, each to a value of its own, and holds cniwire to protobuf-go on
// them: a field (name, number or kind) that agent.proto gains and cniwire
// lacks or codes differently fails here.
func TestEveryFieldIsCovered(t *testing.T) {
	methods := cniService().Methods()
	for i := range methods.Len() {
		md := methods.Get(i)
		t.Run(string(md.Name()), func(t *testing.T) {
			req := newGenerated(t, md.Input())
			populate(t, req.ProtoReflect())
			if r, ok := ours[md.Input().FullName()].(request); ok {
				checkRequest(t, r, req)
			}
			resp := newGenerated(t, md.Output())
			populate(t, resp.ProtoReflect())
			b, err := proto.Marshal(resp)
			if err != nil {
				t.Fatal(err)
			}
			if r, ok := ours[md.Output().FullName()].(response); ok {
				got := reflect.New(reflect.TypeOf(r).Elem()).Interface().(response)
				checkResponse(t, b, got, newGenerated(t, md.Output()))
			}
		})
	}
}

func newGenerated(t *testing.T, md protoreflect.MessageDescriptor) proto.Message {
	mt, err := protoregistry.GlobalTypes.FindMessageByName(md.FullName())
	if err != nil {
		t.Fatal(err)
	}
	return mt.New().Interface()
}

// populate sets every field of m: strings and bytes to the field's own full
// name, bools true, enums their last value, lists two entries, messages
// recursively. A kind it does not know fails: cniwire has no code for it.
func populate(t *testing.T, m protoreflect.Message) {
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		switch {
		case fd.IsList():
			list := m.Mutable(fd).List()
			for j := range 2 {
				if fd.Kind() == protoreflect.MessageKind {
					populate(t, list.AppendMutable().Message())
					continue
				}
				list.Append(scalar(t, fd, j))
			}
		case fd.Kind() == protoreflect.MessageKind:
			populate(t, m.Mutable(fd).Message())
		default:
			m.Set(fd, scalar(t, fd, 0))
		}
	}
}

func scalar(t *testing.T, fd protoreflect.FieldDescriptor, i int) protoreflect.Value {
	name := fmt.Sprintf("%s#%d", fd.FullName(), i)
	switch fd.Kind() {
	case protoreflect.StringKind:
		return protoreflect.ValueOfString(name)
	case protoreflect.BytesKind:
		return protoreflect.ValueOfBytes(bytes.Repeat([]byte(name), 5)) // past 127: a 2-byte length
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(true)
	case protoreflect.EnumKind:
		values := fd.Enum().Values()
		return protoreflect.ValueOfEnum(values.Get(values.Len() - 1).Number())
	}
	t.Fatalf("field %s: kind %s: teach cniwire (and this test) to code it", fd.FullName(), fd.Kind())
	return protoreflect.Value{}
}

// TestEnumsMatch: every value's number and name, and how a number with no
// name prints, as the generated enums have them.
func TestEnumsMatch(t *testing.T) {
	type enum struct {
		desc protoreflect.EnumDescriptor
		ours func(n int32) (string, any)
		gen  func(n int32) string
		// consts are cniwire's named constants, by the generated ones.
		consts map[any]any
	}
	enums := []enum{{
		desc: sluicev1.ApiVersion(0).Descriptor(),
		ours: func(n int32) (string, any) { return cniwire.ApiVersion(n).String(), cniwire.ApiVersion(n) },
		gen:  func(n int32) string { return sluicev1.ApiVersion(n).String() },
		consts: map[any]any{sluicev1.ApiVersion_API_VERSION_UNSPECIFIED: cniwire.ApiVersion_API_VERSION_UNSPECIFIED,
			sluicev1.ApiVersion_API_VERSION_1: cniwire.ApiVersion_API_VERSION_1, sluicev1.ApiVersion_API_VERSION_2: cniwire.ApiVersion_API_VERSION_2},
	}, {
		desc: sluicev1.Mode(0).Descriptor(),
		ours: func(n int32) (string, any) { return cniwire.Mode(n).String(), cniwire.Mode(n) },
		gen:  func(n int32) string { return sluicev1.Mode(n).String() },
		consts: map[any]any{sluicev1.Mode_MODE_UNSPECIFIED: cniwire.Mode_MODE_UNSPECIFIED,
			sluicev1.Mode_MODE_SIDECAR: cniwire.Mode_MODE_SIDECAR, sluicev1.Mode_MODE_AMBIENT: cniwire.Mode_MODE_AMBIENT},
	}}
	for _, e := range enums {
		values := e.desc.Values()
		if values.Len() != len(e.consts) {
			t.Errorf("%s has %d values, cniwire names %d", e.desc.FullName(), values.Len(), len(e.consts))
		}
		for gen, c := range e.consts {
			n := int32(reflect.ValueOf(gen).Int())
			if _, v := e.ours(n); v != c {
				t.Errorf("%s: generated %v is %d, cniwire's constant is %d", e.desc.FullName(), gen, n, reflect.ValueOf(c).Int())
			}
		}
		for _, n := range []int32{-1, 0, 1, 2, 3, 4, 99, 1 << 30, -1 << 31} {
			if got, _ := e.ours(n); got != e.gen(n) {
				t.Errorf("%s(%d).String() = %q, generated %q", e.desc.FullName(), n, got, e.gen(n))
			}
		}
		for i := range values.Len() {
			v := values.Get(i)
			if got, _ := e.ours(int32(v.Number())); got != string(v.Name()) {
				t.Errorf("%s: value %d is %s, cniwire says %q", e.desc.FullName(), v.Number(), v.Name(), got)
			}
		}
	}
}
