package workloads

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// testdata/old-record.json (0ld:eth0.json in a state dir; no ":" in a
// module's file names) was journaled by an agent before IPs were parsed
// at the boundary: bare addresses, prefixes, and a value that is neither.
const oldRecord = "testdata/old-record.json"

var oldRecordIPs = []netip.Prefix{netip.MustParsePrefix("10.0.0.5/32"), netip.MustParsePrefix("10.0.0.6/24"),
	netip.MustParsePrefix("fd00::5/128"), netip.MustParsePrefix("fd00::6/64")}

// An old record still loads: bare addresses as host prefixes, and a value
// that is no address left out with a warning rather than the record moved
// aside (its rules in the kernel are still the agent's).
func TestOldJournalRecordLoads(t *testing.T) {
	b, err := os.ReadFile(oldRecord)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "0ld:eth0.json"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	s := &Store{dir: dir, log: slog.New(slog.NewTextHandler(&logs, nil))}
	recs, err := s.loadJournal()
	if err != nil || len(recs) != 1 {
		t.Fatalf("loadJournal = %v, %v; want the old record", recs, err)
	}
	r := recs[0]
	if r.ContainerID != "0ld" || r.PodName != "cart" || r.Spec.Mode != "ambient" || !slices.Equal(r.IPs, oldRecordIPs) {
		t.Fatalf("old record loaded as %+v, want IPs %v", r, oldRecordIPs)
	}
	if !strings.Contains(logs.String(), "do not parse") || !strings.Contains(logs.String(), "not-an-ip") {
		t.Errorf("no warning naming the value left out; logs: %s", logs.String())
	}
}

// A record is journaled with its IPs as prefix text and reads back the same.
func TestRecordIPsRoundTrip(t *testing.T) {
	in := Record{Attachment: Attachment{ContainerID: "c", IfName: "eth0"}, IPs: oldRecordIPs}
	b, err := json.Marshal(&in)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, []byte(`"ips":["10.0.0.5/32","10.0.0.6/24","fd00::5/128","fd00::6/64"]`)) {
		t.Fatalf("journaled as %s", b)
	}
	var out Record
	if err := json.Unmarshal(b, &out); err != nil || !reflect.DeepEqual(out, in) {
		t.Fatalf("read back %+v (%v), want %+v", out, err, in)
	}
}

func TestParseIP(t *testing.T) {
	for in, want := range map[string]string{"10.0.0.5": "10.0.0.5/32", "10.0.0.5/24": "10.0.0.5/24",
		"fd00::5": "fd00::5/128", "fd00::5/64": "fd00::5/64", "::ffff:10.0.0.5": "::ffff:10.0.0.5/128"} {
		if p, err := ParseIP(in); err != nil || p.String() != want {
			t.Errorf("ParseIP(%q) = %v, %v; want %s", in, p, err, want)
		}
	}
	for _, bad := range []string{"", "x", "10.0.0.5/33", "fe80::1%eth0", " 10.0.0.5"} {
		if p, err := ParseIP(bad); err == nil {
			t.Errorf("ParseIP(%q) = %v, want an error", bad, p)
		}
	}
}
