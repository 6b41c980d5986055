package cniwire

import "google.golang.org/protobuf/encoding/protowire"

// Each response's UnmarshalWire replaces *m with the message decoded from b,
// as proto.Unmarshal does (it does not merge), and fails exactly when
// proto.Unmarshal fails on the same bytes; on failure *m is left as it was.
// Unknown fields are dropped: the plugin has no use for them.

// UnmarshalWire decodes b into m.
func (m *AddResponse) UnmarshalWire(b []byte) error {
	var v AddResponse
	err := walk(b, "sluice.v1.AddResponse", func(f field) error {
		switch f.num {
		case 1:
			f.setBool(&v.Enrolled)
		case 2:
			f.setMode(&v.Mode)
		case 3:
			return f.setString(&v.Reason, "sluice.v1.AddResponse.reason")
		}
		return nil
	})
	if err == nil {
		*m = v
	}
	return err
}

// UnmarshalWire checks that b is well-formed; DelResponse has no fields.
func (m *DelResponse) UnmarshalWire(b []byte) error {
	return walk(b, "sluice.v1.DelResponse", func(field) error { return nil })
}

// UnmarshalWire decodes b into m.
func (m *CheckResponse) UnmarshalWire(b []byte) error {
	var v CheckResponse
	err := walk(b, "sluice.v1.CheckResponse", func(f field) error {
		if f.num == 1 {
			return f.addString(&v.Drift, "sluice.v1.CheckResponse.drift")
		}
		return nil
	})
	if err == nil {
		*m = v
	}
	return err
}

// UnmarshalWire decodes b into m.
func (m *StatusResponse) UnmarshalWire(b []byte) error {
	var v StatusResponse
	err := walk(b, "sluice.v1.StatusResponse", func(f field) error {
		switch f.num {
		case 1:
			f.setBool(&v.Ready)
		case 2:
			return f.setString(&v.Reason, "sluice.v1.StatusResponse.reason")
		}
		return nil
	})
	if err == nil {
		*m = v
	}
	return err
}

// UnmarshalWire decodes b into m.
func (m *GCResponse) UnmarshalWire(b []byte) error {
	var v GCResponse
	err := walk(b, "sluice.v1.GCResponse", func(f field) error {
		if f.num != 1 || f.typ != protowire.BytesType {
			return nil
		}
		a := new(Attachment)
		if err := a.unmarshalWire(f.bytes); err != nil {
			return err
		}
		v.Removed = append(v.Removed, a)
		return nil
	})
	if err == nil {
		*m = v
	}
	return err
}
