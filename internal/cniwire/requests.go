package cniwire

// Each request's AppendWire appends its protobuf encoding to b, fields in
// number order: byte for byte what protobuf-go's deterministic Marshal
// writes. It fails, returning b unchanged, when a string field is not UTF-8.
// To frame a gRPC message, append after the 5-byte prefix and fill in
// len(result)-5.

// AppendWire appends m's encoding to b.
func (m *AddRequest) AppendWire(b []byte) ([]byte, error) {
	return m.appendAs(b, "sluice.v1.AddRequest")
}

// appendAs writes the fields AddRequest and CheckRequest share, numbers
// included, naming msg in errors.
func (m *AddRequest) appendAs(b []byte, msg string) ([]byte, error) {
	if m == nil {
		return b, nil
	}
	e := encoder{b: b, msg: msg}
	e.apiVersion(1, m.ApiVersion)
	e.string(2, "container_id", m.ContainerId)
	e.string(3, "netns", m.Netns)
	e.string(4, "if_name", m.IfName)
	if m.Pod != nil {
		e.message(5, m.Pod)
	}
	for _, ip := range m.Ips {
		e.message(6, ip)
	}
	if m.Config != nil {
		e.message(7, m.Config)
	}
	e.string(8, "request_id", m.RequestId)
	e.strings(9, "warnings", m.Warnings)
	return e.result(b)
}

// AppendWire appends m's encoding to b.
func (m *DelRequest) AppendWire(b []byte) ([]byte, error) {
	if m == nil {
		return b, nil
	}
	e := encoder{b: b, msg: "sluice.v1.DelRequest"}
	e.apiVersion(1, m.ApiVersion)
	e.string(2, "container_id", m.ContainerId)
	e.string(3, "netns", m.Netns)
	e.string(4, "if_name", m.IfName)
	if m.Pod != nil {
		e.message(5, m.Pod)
	}
	if m.Config != nil {
		e.message(6, m.Config)
	}
	e.string(7, "request_id", m.RequestId)
	e.strings(8, "warnings", m.Warnings)
	return e.result(b)
}

// AppendWire appends m's encoding to b.
func (m *CheckRequest) AppendWire(b []byte) ([]byte, error) {
	return (*AddRequest)(m).appendAs(b, "sluice.v1.CheckRequest")
}

// AppendWire appends m's encoding to b.
func (m *StatusRequest) AppendWire(b []byte) ([]byte, error) {
	if m == nil {
		return b, nil
	}
	e := encoder{b: b, msg: "sluice.v1.StatusRequest"}
	e.apiVersion(1, m.ApiVersion)
	if m.Config != nil {
		e.message(2, m.Config)
	}
	e.string(3, "request_id", m.RequestId)
	return e.result(b)
}

// AppendWire appends m's encoding to b.
func (m *GCRequest) AppendWire(b []byte) ([]byte, error) {
	if m == nil {
		return b, nil
	}
	e := encoder{b: b, msg: "sluice.v1.GCRequest"}
	e.apiVersion(1, m.ApiVersion)
	for _, a := range m.ValidAttachments {
		e.message(2, a)
	}
	if m.Config != nil {
		e.message(3, m.Config)
	}
	e.string(4, "request_id", m.RequestId)
	e.boolean(5, m.ValidAttachmentsPresent)
	return e.result(b)
}
