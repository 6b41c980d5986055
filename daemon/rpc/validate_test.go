package rpc

import (
	"strings"
	"testing"

	sluicev1 "github.com/sluicemesh/sluice/api/sluice/v1"
)

func TestCheckAttachment(t *testing.T) {
	for _, tc := range []struct {
		id, ifName string
		ok         bool
	}{
		{"c0ffee", "eth0", true},
		{"a_b.c-d", "net1", true},
		{strings.Repeat("f", 64), "eth0", true},
		{"", "eth0", false},
		{"-lead", "eth0", false},
		{"../etc", "eth0", false},
		{"a/b", "eth0", false},
		{"a:b", "eth0", false},
		{"a b", "eth0", false},
		{strings.Repeat("a", 257), "eth0", false},
		{strings.Repeat("a", 226), "0123456789abcde", true},
		{strings.Repeat("a", 227), "eth0", false},
		{strings.Repeat("a", 246), "eth0", false},
		{strings.Repeat("a", 256), "eth0", false},
		{"ok", "", false},
		{"ok", ".", false},
		{"ok", "..", false},
		{"ok", "eth0/x", false},
		{"ok", "eth:0", false},
		{"ok", "eth 0", false},
		{"ok", "eth\x000", false},
		{"ok", "\x7f", false},
		{"ok", "0123456789abcdef", false},
	} {
		_, err := checkAttachment(tc.id, tc.ifName)
		if (err == nil) != tc.ok {
			t.Errorf("checkAttachment(%q, %q) = %v, want ok=%v", tc.id, tc.ifName, err, tc.ok)
		}
	}
}

func TestCheckAPIVersion(t *testing.T) {
	for _, v := range []sluicev1.ApiVersion{apiVersion, apiVersion - 1} {
		if err := checkAPIVersion(v); err != nil {
			t.Errorf("version %d refused: %v", v, err)
		}
	}
	for _, v := range []int32{0, int32(apiVersion) + 1, -1} {
		err := checkAPIVersion(sluiceVersion(v))
		if err == nil || !strings.Contains(err.Error(), "serves 1 through 2") {
			t.Errorf("version %d: %v", v, err)
		}
	}
}

// Whatever passes validation is safe as a journal file name component.
func FuzzCheckAttachment(f *testing.F) {
	f.Add("c0ffee", "eth0")
	f.Add("../x", "a/b")
	f.Fuzz(func(t *testing.T, id, ifName string) {
		a, err := checkAttachment(id, ifName)
		if err != nil {
			return
		}
		if n := len(a.ContainerID + ":" + a.IfName + ".json.corrupt"); n > 255 {
			t.Fatalf("accepted %q/%q: a journal file name of %d bytes", id, ifName, n)
		}
		for _, s := range []string{a.ContainerID, a.IfName} {
			if strings.ContainsAny(s, "/:\x00") || s == "." || s == ".." || s == "" {
				t.Fatalf("accepted unsafe attachment %q/%q", id, ifName)
			}
		}
	})
}

func sluiceVersion(v int32) sluicev1.ApiVersion { return sluicev1.ApiVersion(v) }
