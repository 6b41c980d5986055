package cniwire

import (
	"fmt"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
)

// encoder appends fields in proto3's form: zero scalars and nil
// sub-messages are left out, a set sub-message is written even when empty,
// a repeated field is one entry per element. The first error sticks.
type encoder struct {
	b   []byte
	err error
	msg string // the message being written, for errors
}

// message is a sub-message's fields (nil-safe: a nil element of a repeated
// field is written as an empty message, as protobuf-go's Marshal does). The
// encoder goes by value: a pointer through an interface call would move it
// to the heap, one allocation a request.
type message interface {
	appendFields(e encoder) encoder
}

// result is e's bytes, or b as the caller passed it and the error.
func (e *encoder) result(b []byte) ([]byte, error) {
	if e.err != nil {
		return b, e.err
	}
	return e.b, nil
}

func (e *encoder) varint(num protowire.Number, v uint64) {
	if v == 0 {
		return
	}
	e.b = protowire.AppendTag(e.b, num, protowire.VarintType)
	e.b = protowire.AppendVarint(e.b, v)
}

func (e *encoder) boolean(num protowire.Number, v bool) {
	if v {
		e.varint(num, 1)
	}
}

// apiVersion sign-extends, as protobuf encodes every negative int32: ten bytes.
func (e *encoder) apiVersion(num protowire.Number, v ApiVersion) {
	e.varint(num, uint64(int64(v)))
}

func (e *encoder) string(num protowire.Number, field, s string) {
	if s != "" {
		e.element(num, field, s)
	}
}

func (e *encoder) strings(num protowire.Number, field string, ss []string) {
	for _, s := range ss {
		e.element(num, field, s)
	}
}

// element writes s even when empty. proto3 strings must be UTF-8: protobuf-go
// refuses to marshal anything else, so the agent could never have received
// it; cniwire refuses too, naming the field as protobuf-go does.
func (e *encoder) element(num protowire.Number, field, s string) {
	if !utf8.ValidString(s) {
		if e.err == nil {
			e.err = fmt.Errorf("cniwire: string field %s.%s contains invalid UTF-8", e.msg, field)
		}
		return
	}
	e.b = protowire.AppendTag(e.b, num, protowire.BytesType)
	e.b = protowire.AppendString(e.b, s)
}

func (e *encoder) bytes(num protowire.Number, v []byte) {
	if len(v) > 0 {
		e.b = protowire.AppendTag(e.b, num, protowire.BytesType)
		e.b = protowire.AppendBytes(e.b, v)
	}
}

// message writes m length-prefixed. The fields are written first, after a
// one-byte length (every CNI sub-message is short); a longer one moves them
// up to make room for its length's varint. No size pass, one field list.
func (e *encoder) message(num protowire.Number, m message) {
	e.b = protowire.AppendTag(e.b, num, protowire.BytesType)
	at := len(e.b)
	e.b = append(e.b, 0)
	msg := e.msg
	*e = m.appendFields(*e)
	e.msg = msg
	n := len(e.b) - at - 1
	if n < 0x80 {
		e.b[at] = byte(n)
		return
	}
	w := protowire.SizeVarint(uint64(n))
	e.b = append(e.b, make([]byte, w-1)...)
	copy(e.b[at+w:], e.b[at+1:at+1+n])
	protowire.AppendVarint(e.b[:at], uint64(n))
}

func (m *PodRef) appendFields(e encoder) encoder {
	if m == nil {
		return e
	}
	e.msg = "sluice.v1.PodRef"
	e.string(1, "namespace", m.Namespace)
	e.string(2, "name", m.Name)
	e.string(3, "uid", m.Uid)
	return e
}

func (m *IPConfig) appendFields(e encoder) encoder {
	if m == nil {
		return e
	}
	e.msg = "sluice.v1.IPConfig"
	e.string(1, "address", m.Address)
	e.string(2, "gateway", m.Gateway)
	e.string(3, "interface", m.Interface)
	return e
}

func (m *PluginConfig) appendFields(e encoder) encoder {
	if m == nil {
		return e
	}
	e.msg = "sluice.v1.PluginConfig"
	e.string(1, "cni_version", m.CniVersion)
	e.string(2, "network_name", m.NetworkName)
	e.bytes(3, m.Raw)
	return e
}

func (m *Attachment) appendFields(e encoder) encoder {
	if m == nil {
		return e
	}
	e.msg = "sluice.v1.Attachment"
	e.string(1, "container_id", m.ContainerId)
	e.string(2, "if_name", m.IfName)
	return e
}
