package main

import (
	"strings"

	"github.com/sluicemesh/sluice/internal/grpccall"
)

// The runtime's trace context (libcni sets TRACEPARENT and TRACESTATE in
// the plugin's environment) goes to the agent as the W3C headers its
// propagator reads, so the agent's spans join the caller's trace. The
// plugin links no tracing SDK (test/layout): the format is checked here,
// by hand, and held to OpenTelemetry's propagator by FuzzTraceContext.
// A malformed value is dropped, never an error: tracing must not fail a
// pod's start.

// maxTraceHeader bounds what is forwarded: the W3C asks vendors to pass on
// at least 512 characters of tracestate; traceparent version 00 is 55.
const maxTraceHeader = 512

// traceHeaders is the metadata the call carries: traceparent when valid,
// and tracestate only beside a valid traceparent.
func traceHeaders(getenv func(string) string) []grpccall.Header {
	tp := getenv("TRACEPARENT")
	if !validTraceparent(tp) {
		return nil
	}
	md := []grpccall.Header{{Name: "traceparent", Value: tp}}
	if ts := getenv("TRACESTATE"); ts != "" && validTracestate(ts) {
		md = append(md, grpccall.Header{Name: "tracestate", Value: ts})
	}
	return md
}

// validTraceparent: version "-" trace-id "-" parent-id "-" flags, in
// lowercase hex. Version ff is invalid; 00 is exactly 55 characters with
// flags 00-03; a later version may append "-" and more. An all-zero trace
// or parent id is invalid.
func validTraceparent(s string) bool {
	if len(s) < 55 || len(s) > maxTraceHeader {
		return false
	}
	if !lowerHex(s[0:2]) || s[0:2] == "ff" || s[2] != '-' ||
		!lowerHex(s[3:35]) || allZero(s[3:35]) || s[35] != '-' ||
		!lowerHex(s[36:52]) || allZero(s[36:52]) || s[52] != '-' || !lowerHex(s[53:55]) {
		return false
	}
	if s[0:2] == "00" {
		return len(s) == 55 && s[53] == '0' && s[54] <= '3'
	}
	// A later version's own fields: what follows must be "-" and header-safe.
	return len(s) == 55 || s[55] == '-' && printable(s[56:])
}

// validTracestate: at most 32 comma-separated key=value members (empty
// ones skipped), with the W3C's key and value characters. Duplicate keys
// are left to the agent's parser, which drops the whole tracestate then
// and keeps the traceparent.
func validTracestate(s string) bool {
	if len(s) > maxTraceHeader {
		return false
	}
	members := 0
	for m := range strings.SplitSeq(s, ",") {
		if m == "" {
			continue
		}
		if members++; members > 32 {
			return false
		}
		// Blanks may surround a member, not stand for one.
		k, v, ok := strings.Cut(m, "=")
		if !ok || !tracestateKey(strings.TrimLeft(k, " \t")) || !tracestateValue(strings.TrimRight(v, " \t")) {
			return false
		}
	}
	return true
}

// tracestateKey: lcalpha then up to 255 of lcalpha, digit, _ - * /; or
// tenant@system, the tenant starting with a letter or digit (241 at most),
// the system with a letter (14 at most).
func tracestateKey(k string) bool {
	tenant, system, multi := strings.Cut(k, "@")
	if !multi {
		return len(k) >= 1 && len(k) <= 256 && 'a' <= k[0] && k[0] <= 'z' && keyChars(k[1:])
	}
	return len(tenant) >= 1 && len(tenant) <= 241 && ('a' <= tenant[0] && tenant[0] <= 'z' || '0' <= tenant[0] && tenant[0] <= '9') &&
		keyChars(tenant[1:]) && len(system) >= 1 && len(system) <= 14 && 'a' <= system[0] && system[0] <= 'z' && keyChars(system[1:])
}

func keyChars(s string) bool {
	for i := 0; i < len(s); i++ {
		b := s[i]
		if !('a' <= b && b <= 'z' || '0' <= b && b <= '9' || b == '_' || b == '-' || b == '*' || b == '/') {
			return false
		}
	}
	return true
}

// tracestateValue: 1-256 printable characters but "," and "=", the last
// not a space.
func tracestateValue(v string) bool {
	if len(v) == 0 || len(v) > 256 || v[len(v)-1] == ' ' {
		return false
	}
	for i := 0; i < len(v); i++ {
		if b := v[i]; b < 0x20 || b > 0x7e || b == ',' || b == '=' {
			return false
		}
	}
	return true
}

func lowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if b := s[i]; !('0' <= b && b <= '9' || 'a' <= b && b <= 'f') {
			return false
		}
	}
	return true
}

func allZero(s string) bool { return strings.Trim(s, "0") == "" }

func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if b := s[i]; b < 0x20 || b > 0x7e {
			return false
		}
	}
	return true
}
