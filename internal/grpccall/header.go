package grpccall

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
)

// maxHeaderBytes bounds the answer's header blocks (announced as
// SETTINGS_MAX_HEADER_LIST_SIZE and enforced while decoding).
const maxHeaderBytes = 16 << 10

// Header is one metadata entry a call sends with its request headers
// (the plugin's W3C trace context: traceparent, tracestate).
type Header struct{ Name, Value string }

// check refuses what would break the request or pass for one of gRPC's own
// headers: a caller's bug, never the server's.
func (h Header) check() error {
	if !validName(h.Name) || !validValue(h.Value) || strings.HasPrefix(h.Name, "grpc-") ||
		h.Name == "content-type" || h.Name == "te" {
		return newStatus(codes.Internal, "metadata %q cannot be sent", h.Name)
	}
	return nil
}

// requestHeaders is the HPACK block of a unary call's HEADERS frame.
func requestHeaders(ctx context.Context, method string, md []Header) ([]byte, error) {
	var buf bytes.Buffer
	enc := hpack.NewEncoder(&buf)
	fields := []hpack.HeaderField{
		{Name: ":method", Value: "POST"},
		{Name: ":scheme", Value: "http"},
		{Name: ":path", Value: method},
		// grpc-go's server wants an authority; a unix socket has none.
		{Name: ":authority", Value: "localhost"},
		{Name: "content-type", Value: "application/grpc"},
		{Name: "te", Value: "trailers"},
	}
	if dl, ok := ctx.Deadline(); ok {
		left := time.Until(dl)
		if left <= 0 {
			return nil, newStatus(codes.DeadlineExceeded, "context deadline exceeded")
		}
		fields = append(fields, hpack.HeaderField{Name: "grpc-timeout", Value: encodeTimeout(left)})
	}
	for _, h := range md {
		if err := h.check(); err != nil {
			return nil, err
		}
		fields = append(fields, hpack.HeaderField{Name: h.Name, Value: h.Value})
	}
	for _, f := range fields {
		if err := enc.WriteField(f); err != nil {
			return nil, err
		}
	}
	return buf.Bytes(), nil
}

// encodeTimeout writes a grpc-timeout value: at most 8 digits and a unit,
// rounded up so the server never gives up before the client.
func encodeTimeout(d time.Duration) string {
	const maxDigits = 1e8 - 1
	for _, u := range []struct {
		unit time.Duration
		s    string
	}{{time.Millisecond, "m"}, {time.Second, "S"}, {time.Minute, "M"}, {time.Hour, "H"}} {
		if n := (d + u.unit - 1) / u.unit; n <= maxDigits {
			return strconv.FormatInt(int64(n), 10) + u.s
		}
	}
	return strconv.Itoa(maxDigits) + "H"
}

// headerBlock is what this client reads from one decoded header block.
type headerBlock struct {
	httpStatus  string
	contentType string
	grpcStatus  string
	grpcMessage string
	hasGRPC     bool // grpc-status was present
}

// decodeHeaders decodes one complete header block with the connection's
// HPACK decoder, keeping the few fields a unary call needs.
func decodeHeaders(dec *hpack.Decoder, block []byte) (headerBlock, error) {
	var h headerBlock
	var fields fieldCheck
	size := 0
	dec.SetEmitFunc(func(f hpack.HeaderField) {
		size += int(f.Size())
		fields.add(f)
		switch f.Name {
		case ":status":
			h.httpStatus = f.Value
		case "content-type":
			h.contentType = f.Value
		case "grpc-status":
			h.grpcStatus, h.hasGRPC = f.Value, true
		case "grpc-message":
			h.grpcMessage = f.Value
		}
	})
	if _, err := dec.Write(block); err != nil {
		return h, protocolError("HPACK: %v", err)
	}
	if err := dec.Close(); err != nil {
		return h, protocolError("HPACK: %v", err)
	}
	if size > maxHeaderBytes {
		return h, protocolError("header list of %d bytes, over the %d this client announced", size, maxHeaderBytes)
	}
	if fields.problem != "" {
		return h, protocolError("a malformed header block: %s", fields.problem)
	}
	return h, nil
}

// fieldCheck holds a header block to RFC 9113 §8.2-8.3 as x/net's Framer
// does (FuzzAnswerOracle compares them): lowercase token names, values
// without control characters, known pseudo-header fields before the
// regular ones, each once, of a request or of a response, not both.
type fieldCheck struct {
	problem           string
	regular           bool
	request, response bool
	pseudo            []string
}

func (c *fieldCheck) add(f hpack.HeaderField) {
	if c.problem != "" {
		return
	}
	if !validValue(f.Value) {
		c.problem = fmt.Sprintf("field %q has a control character in its value", f.Name)
		return
	}
	if !strings.HasPrefix(f.Name, ":") {
		c.regular = true
		if !validName(f.Name) {
			c.problem = fmt.Sprintf("invalid field name %q", f.Name)
		}
		return
	}
	switch {
	case c.regular:
		c.problem = "pseudo-header field after a regular one"
	case slices.Contains(c.pseudo, f.Name):
		c.problem = fmt.Sprintf("pseudo-header field %s twice", f.Name)
	case f.Name == ":status":
		c.response = true
	case f.Name == ":method", f.Name == ":path", f.Name == ":scheme", f.Name == ":authority", f.Name == ":protocol":
		c.request = true
	default:
		c.problem = fmt.Sprintf("unknown pseudo-header field %q", f.Name)
	}
	if c.request && c.response && c.problem == "" {
		c.problem = "pseudo-header fields of a request and a response"
	}
	c.pseudo = append(c.pseudo, f.Name)
}

// validName: a token (RFC 9110 §5.6.2) in lowercase.
func validName(n string) bool {
	if n == "" {
		return false
	}
	for i := 0; i < len(n); i++ {
		b := n[i]
		if !('a' <= b && b <= 'z' || '0' <= b && b <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", b) >= 0) {
			return false
		}
	}
	return true
}

// validValue: no control character but tab (RFC 9110 §5.5).
func validValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if b := v[i]; b < ' ' && b != '\t' || b == 0x7f {
			return false
		}
	}
	return true
}

// status is the call's end as the trailers (or a trailers-only answer) say.
func (h headerBlock) status() *Status {
	if !h.hasGRPC {
		if h.httpStatus != "" && h.httpStatus != "200" {
			return httpStatus(h.httpStatus)
		}
		return protocolError("the stream ended without grpc-status")
	}
	n, err := strconv.ParseUint(h.grpcStatus, 10, 32)
	if err != nil {
		return protocolError("malformed grpc-status %q", h.grpcStatus)
	}
	return &Status{Code: codes.Code(n), Message: decodeMessage(h.grpcMessage), Answered: true}
}

// check refuses response headers that do not start a gRPC
// answer. A trailers-only answer is read by status instead.
func (h headerBlock) check() *Status {
	if h.httpStatus != "200" {
		return httpStatus(h.httpStatus)
	}
	if ct := h.contentType; ct != "application/grpc" && !strings.HasPrefix(ct, "application/grpc+") && !strings.HasPrefix(ct, "application/grpc;") {
		return protocolError("content-type %q is not gRPC", ct)
	}
	return nil
}

// httpStatus maps a non-200 :status the way the gRPC spec and grpc-go do.
func httpStatus(s string) *Status {
	if s == "" {
		return protocolError("no :status in the response headers")
	}
	code := codes.Unknown
	switch s {
	case "400":
		code = codes.Internal
	case "401":
		code = codes.Unauthenticated
	case "403":
		code = codes.PermissionDenied
	case "404":
		code = codes.Unimplemented
	case "429", "502", "503", "504":
		code = codes.Unavailable
	}
	return newStatus(code, "unexpected HTTP status code received from server: %s", s)
}

// decodeMessage undoes grpc-message's percent-encoding (the gRPC spec:
// %XX for bytes outside printable ASCII); a malformed escape stays as is.
func decodeMessage(m string) string {
	if !strings.Contains(m, "%") {
		return m
	}
	var b strings.Builder
	for i := 0; i < len(m); i++ {
		if m[i] == '%' && i+2 < len(m) {
			if v, err := strconv.ParseUint(m[i+1:i+3], 16, 8); err == nil {
				b.WriteByte(byte(v))
				i += 2
				continue
			}
		}
		b.WriteByte(m[i])
	}
	return b.String()
}
