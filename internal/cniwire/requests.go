package cniwire

// Each request's AppendWire appends its protobuf encoding to b, fields in
// number order: byte for byte what protobuf-go's deterministic Marshal
// writes. It fails, returning b unchanged, when a string field is not UTF-8.
// To frame a gRPC message, append after the 5-byte prefix and fill in
// len(result)-5.

// AppendWire appends m's encoding to b.
func (m *AddRequest) AppendWire(b []byte) ([]byte, error) {
	if m == nil {
		return b, nil
	}
	e := encoder{b: b}
	e.apiVersion(1, m.ApiVersion)
	e.string(2, "sluice.v1.AddRequest.container_id", m.ContainerId)
	e.string(3, "sluice.v1.AddRequest.netns", m.Netns)
	e.string(4, "sluice.v1.AddRequest.if_name", m.IfName)
	if m.Pod != nil {
		e.message(5, m.Pod)
	}
	for _, ip := range m.Ips {
		e.message(6, ip)
	}
	if m.Config != nil {
		e.message(7, m.Config)
	}
	e.string(8, "sluice.v1.AddRequest.request_id", m.RequestId)
	e.strings(9, "sluice.v1.AddRequest.warnings", m.Warnings)
	return e.result(b)
}

// AppendWire appends m's encoding to b.
func (m *DelRequest) AppendWire(b []byte) ([]byte, error) {
	if m == nil {
		return b, nil
	}
	e := encoder{b: b}
	e.apiVersion(1, m.ApiVersion)
	e.string(2, "sluice.v1.DelRequest.container_id", m.ContainerId)
	e.string(3, "sluice.v1.DelRequest.netns", m.Netns)
	e.string(4, "sluice.v1.DelRequest.if_name", m.IfName)
	if m.Pod != nil {
		e.message(5, m.Pod)
	}
	if m.Config != nil {
		e.message(6, m.Config)
	}
	e.string(7, "sluice.v1.DelRequest.request_id", m.RequestId)
	e.strings(8, "sluice.v1.DelRequest.warnings", m.Warnings)
	return e.result(b)
}

// AppendWire appends m's encoding to b.
func (m *CheckRequest) AppendWire(b []byte) ([]byte, error) {
	if m == nil {
		return b, nil
	}
	e := encoder{b: b}
	e.apiVersion(1, m.ApiVersion)
	e.string(2, "sluice.v1.CheckRequest.container_id", m.ContainerId)
	e.string(3, "sluice.v1.CheckRequest.netns", m.Netns)
	e.string(4, "sluice.v1.CheckRequest.if_name", m.IfName)
	if m.Pod != nil {
		e.message(5, m.Pod)
	}
	for _, ip := range m.Ips {
		e.message(6, ip)
	}
	if m.Config != nil {
		e.message(7, m.Config)
	}
	e.string(8, "sluice.v1.CheckRequest.request_id", m.RequestId)
	e.strings(9, "sluice.v1.CheckRequest.warnings", m.Warnings)
	return e.result(b)
}

// AppendWire appends m's encoding to b.
func (m *StatusRequest) AppendWire(b []byte) ([]byte, error) {
	if m == nil {
		return b, nil
	}
	e := encoder{b: b}
	e.apiVersion(1, m.ApiVersion)
	if m.Config != nil {
		e.message(2, m.Config)
	}
	e.string(3, "sluice.v1.StatusRequest.request_id", m.RequestId)
	return e.result(b)
}

// AppendWire appends m's encoding to b.
func (m *GCRequest) AppendWire(b []byte) ([]byte, error) {
	if m == nil {
		return b, nil
	}
	e := encoder{b: b}
	e.apiVersion(1, m.ApiVersion)
	for _, a := range m.ValidAttachments {
		e.message(2, a)
	}
	if m.Config != nil {
		e.message(3, m.Config)
	}
	e.string(4, "sluice.v1.GCRequest.request_id", m.RequestId)
	e.boolean(5, m.ValidAttachmentsPresent)
	return e.result(b)
}
