package cniwire

import (
	"fmt"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
)

// field is one field as read off the wire.
type field struct {
	num    protowire.Number
	typ    protowire.Type
	varint uint64 // the value, when typ is VarintType
	bytes  []byte // the contents, when typ is BytesType
}

// walk hands each field of b to use, in order, with protobuf-go's rules for
// what is malformed: a tag's number outside 1..2^29-1, a truncated or
// overlong varint, a length past the end, a stray or mismatched end-group,
// wire types 6 and 7. Unknown fields of every wire type (groups included,
// nested up to protowire's limit) are skipped. A known number with another
// wire type than its own is skipped as unknown too, as protobuf-go does: the
// setters below ignore a field whose wire type is not theirs.
func walk(b []byte, msg string, use func(f field) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("cniwire: %s: bad field tag: %w", msg, protowire.ParseError(n))
		}
		if num > protowire.MaxValidNumber {
			return fmt.Errorf("cniwire: %s: field number %d is out of range", msg, num)
		}
		b = b[n:]
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return fmt.Errorf("cniwire: %s: field %d: %w", msg, num, protowire.ParseError(n))
		}
		f := field{num: num, typ: typ}
		switch typ {
		case protowire.VarintType:
			f.varint, _ = protowire.ConsumeVarint(b)
		case protowire.BytesType:
			f.bytes, _ = protowire.ConsumeBytes(b)
		}
		if err := use(f); err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

// setBool: any nonzero varint is true; a later value replaces an earlier one.
func (f field) setBool(dst *bool) {
	if f.typ == protowire.VarintType {
		*dst = f.varint != 0
	}
}

// setMode keeps the low 32 bits, as protobuf-go does for an int32 enum; a
// number agent.proto does not name is kept (open enum).
func (f field) setMode(dst *Mode) {
	if f.typ == protowire.VarintType {
		*dst = Mode(int32(f.varint))
	}
}

func (f field) setString(dst *string, name string) error {
	if f.typ != protowire.BytesType {
		return nil
	}
	if !utf8.Valid(f.bytes) {
		return errUTF8(name)
	}
	*dst = string(f.bytes)
	return nil
}

func (f field) addString(dst *[]string, name string) error {
	if f.typ != protowire.BytesType {
		return nil
	}
	if !utf8.Valid(f.bytes) {
		return errUTF8(name)
	}
	*dst = append(*dst, string(f.bytes))
	return nil
}

func errUTF8(name string) error {
	return fmt.Errorf("cniwire: string field %s contains invalid UTF-8", name)
}

func (m *Attachment) unmarshalWire(b []byte) error {
	return walk(b, "sluice.v1.Attachment", func(f field) error {
		switch f.num {
		case 1:
			return f.setString(&m.ContainerId, "sluice.v1.Attachment.container_id")
		case 2:
			return f.setString(&m.IfName, "sluice.v1.Attachment.if_name")
		}
		return nil
	})
}
