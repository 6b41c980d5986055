package cniwire_test

import (
	"bytes"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	sluicev1 "github.com/sluicemesh/sluice/api/sluice/v1"
	"github.com/sluicemesh/sluice/internal/cniwire"
)

// request is what every cniwire request has.
type request interface {
	AppendWire(b []byte) ([]byte, error)
}

// prefix stands for what a caller appends after (a gRPC frame header).
var prefix = []byte{0, 0xa1, 0xa2, 0xa3, 0xa4}

// checkRequest holds ours (a new cniwire request mirroring gen) to
// protobuf-go: it fails exactly when Marshal fails (a string field not
// UTF-8), and otherwise writes Marshal's bytes, which Unmarshal reads back to
// gen. Byte equality holds because protobuf-go's Marshal writes a generated
// message's fields in number order, and so does cniwire.
func checkRequest(t *testing.T, ours request, gen proto.Message) {
	t.Helper()
	m, err := mirrored(ours, gen)
	if err != nil {
		t.Fatal(err)
	}
	want, werr := proto.MarshalOptions{Deterministic: true}.Marshal(gen)
	got, err := m.(request).AppendWire(bytes.Clone(prefix))
	if (err == nil) != (werr == nil) {
		t.Fatalf("proto.Marshal: %v; AppendWire: %v", werr, err)
	}
	if !bytes.Equal(got[:len(prefix)], prefix) {
		t.Fatalf("AppendWire changed the bytes it appends to: % x", got[:len(prefix)])
	}
	if err != nil {
		if len(got) != len(prefix) || !strings.Contains(err.Error(), "sluice.v1.") {
			t.Fatalf("AppendWire failed with %d bytes and %q; want the input back and the field named", len(got), err)
		}
		return
	}
	if !bytes.Equal(got[len(prefix):], want) {
		t.Fatalf("AppendWire:\n% x\nproto.Marshal:\n% x", got[len(prefix):], want)
	}
	back := gen.ProtoReflect().Type().New().Interface()
	if err := proto.Unmarshal(got[len(prefix):], back); err != nil || !proto.Equal(back, gen) {
		t.Fatalf("proto.Unmarshal: %v\n got %v\nwant %v", err, back, gen)
	}
}

// The fuzzers share one signature and one seed set. Lists are spelled as a
// string whose first byte only marks presence ("" is nil, "-" is one empty
// entry): records split on \x1d, a record's fields on \x1e. Cutting at those
// ASCII bytes keeps valid UTF-8 valid; a multi-byte first byte leaves the rest
// invalid, which exercises the refusal.
type input struct {
	api                        int32
	containerID, netns, ifName string
	pod, list, config          string
	raw                        []byte
	requestID, warnings        string
	present                    bool
}

func split(s, sep string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s[1:], sep)
}

func at(f []string, i int) string {
	if i < len(f) {
		return f[i]
	}
	return ""
}

func (in input) podRef() *sluicev1.PodRef {
	f := split(in.pod, "\x1e")
	if f == nil {
		return nil
	}
	return &sluicev1.PodRef{Namespace: at(f, 0), Name: at(f, 1), Uid: at(f, 2)}
}

func (in input) pluginConfig() *sluicev1.PluginConfig {
	f := split(in.config, "\x1e")
	if f == nil {
		return nil
	}
	return &sluicev1.PluginConfig{CniVersion: at(f, 0), NetworkName: at(f, 1), Raw: in.raw}
}

func (in input) ips() []*sluicev1.IPConfig {
	var out []*sluicev1.IPConfig
	for _, r := range split(in.list, "\x1d") {
		f := strings.Split(r, "\x1e")
		out = append(out, &sluicev1.IPConfig{Address: at(f, 0), Gateway: at(f, 1), Interface: at(f, 2)})
	}
	return out
}

func (in input) attachments() []*sluicev1.Attachment {
	var out []*sluicev1.Attachment
	for _, r := range split(in.list, "\x1d") {
		f := strings.Split(r, "\x1e")
		out = append(out, &sluicev1.Attachment{ContainerId: at(f, 0), IfName: at(f, 1)})
	}
	return out
}

func addSeeds(f *testing.F) {
	long := strings.Repeat("x", 200)
	seeds := []input{
		{},
		{api: 2, containerID: "c1", netns: "/var/run/netns/cni-1", ifName: "eth0", pod: "-default\x1ep\x1eu-1",
			list: "-10.0.0.5/24\x1e10.0.0.1\x1eeth0\x1dfd00::5/64", config: "-1.1.0\x1ek8s-pod-network", raw: []byte(`{"type":"sluice"}`),
			requestID: "r1", warnings: "-w1\x1ew2", present: true},
		{pod: "-", config: "-", list: "-", warnings: "-"},                                  // present but empty everywhere
		{api: -1, containerID: "ünïcödé ☃", netns: "日本", ifName: "\x00", pod: "-\x1e\x1e"}, // negative enum, NUL, unicode
		{api: 1 << 30, list: "-" + strings.Repeat("\x1d10.0.0.1/32", 300), warnings: "-" + strings.Repeat("\x1e", 100)},
		{pod: "-" + long + "\x1e" + long, config: "-" + long, raw: bytes.Repeat([]byte{0xff}, 20000)}, // 2- and 3-byte lengths
		{containerID: "\xff", present: true},                                                          // not UTF-8
		{list: "\xc3\x1d", warnings: "-ok\x1e\xed\xa0\x80"},                                           // a cut rune; a surrogate
		{pod: "-a\x1e\x80", config: "-\x1e\xc0\xaf"},                                                  // inside sub-messages
	}
	for _, s := range seeds {
		f.Add(s.api, s.containerID, s.netns, s.ifName, s.pod, s.list, s.config, s.raw, s.requestID, s.warnings, s.present)
	}
}

func FuzzAddRequest(f *testing.F) {
	addSeeds(f)
	f.Fuzz(func(t *testing.T, api int32, containerID, netns, ifName, pod, list, config string, raw []byte, requestID, warnings string, present bool) {
		in := input{api, containerID, netns, ifName, pod, list, config, raw, requestID, warnings, present}
		checkRequest(t, &cniwire.AddRequest{}, &sluicev1.AddRequest{ApiVersion: sluicev1.ApiVersion(api), ContainerId: containerID,
			Netns: netns, IfName: ifName, Pod: in.podRef(), Ips: in.ips(), Config: in.pluginConfig(), RequestId: requestID,
			Warnings: split(warnings, "\x1e")})
	})
}

func FuzzCheckRequest(f *testing.F) {
	addSeeds(f)
	f.Fuzz(func(t *testing.T, api int32, containerID, netns, ifName, pod, list, config string, raw []byte, requestID, warnings string, present bool) {
		in := input{api, containerID, netns, ifName, pod, list, config, raw, requestID, warnings, present}
		checkRequest(t, &cniwire.CheckRequest{}, &sluicev1.CheckRequest{ApiVersion: sluicev1.ApiVersion(api), ContainerId: containerID,
			Netns: netns, IfName: ifName, Pod: in.podRef(), Ips: in.ips(), Config: in.pluginConfig(), RequestId: requestID,
			Warnings: split(warnings, "\x1e")})
	})
}

func FuzzDelRequest(f *testing.F) {
	addSeeds(f)
	f.Fuzz(func(t *testing.T, api int32, containerID, netns, ifName, pod, list, config string, raw []byte, requestID, warnings string, present bool) {
		in := input{api, containerID, netns, ifName, pod, list, config, raw, requestID, warnings, present}
		checkRequest(t, &cniwire.DelRequest{}, &sluicev1.DelRequest{ApiVersion: sluicev1.ApiVersion(api), ContainerId: containerID,
			Netns: netns, IfName: ifName, Pod: in.podRef(), Config: in.pluginConfig(), RequestId: requestID,
			Warnings: split(warnings, "\x1e")})
	})
}

func FuzzStatusRequest(f *testing.F) {
	addSeeds(f)
	f.Fuzz(func(t *testing.T, api int32, containerID, netns, ifName, pod, list, config string, raw []byte, requestID, warnings string, present bool) {
		in := input{api, containerID, netns, ifName, pod, list, config, raw, requestID, warnings, present}
		checkRequest(t, &cniwire.StatusRequest{}, &sluicev1.StatusRequest{ApiVersion: sluicev1.ApiVersion(api),
			Config: in.pluginConfig(), RequestId: requestID})
	})
}

func FuzzGCRequest(f *testing.F) {
	addSeeds(f)
	f.Fuzz(func(t *testing.T, api int32, containerID, netns, ifName, pod, list, config string, raw []byte, requestID, warnings string, present bool) {
		in := input{api, containerID, netns, ifName, pod, list, config, raw, requestID, warnings, present}
		checkRequest(t, &cniwire.GCRequest{}, &sluicev1.GCRequest{ApiVersion: sluicev1.ApiVersion(api),
			ValidAttachments: in.attachments(), Config: in.pluginConfig(), RequestId: requestID, ValidAttachmentsPresent: present})
	})
}

// A nil element of a repeated message field is written as an empty message,
// as protobuf-go writes it (proto.Equal would tell nil from empty, so the
// fuzzers never build one; the bytes say it here).
func TestNilElementIsEmptyMessage(t *testing.T) {
	want, err := proto.Marshal(&sluicev1.GCRequest{ValidAttachments: []*sluicev1.Attachment{nil, {IfName: "eth0"}, nil}})
	if err != nil {
		t.Fatal(err)
	}
	got, err := (&cniwire.GCRequest{ValidAttachments: []*cniwire.Attachment{nil, {IfName: "eth0"}, nil}}).AppendWire(nil)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("AppendWire: % x, %v; proto.Marshal: % x", got, err, want)
	}
}

// A nil request is an empty message, as proto.Marshal has it.
func TestNilRequestIsEmpty(t *testing.T) {
	got, err := (*cniwire.AddRequest)(nil).AppendWire([]byte{1})
	if err != nil || !bytes.Equal(got, []byte{1}) {
		t.Fatalf("AppendWire: % x, %v", got, err)
	}
}
