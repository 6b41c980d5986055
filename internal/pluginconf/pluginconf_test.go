package pluginconf

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestMapRoundTrips: what the agent writes is what the plugin reads, key for
// key, so a renamed JSON tag cannot silently drop a setting.
func TestMapRoundTrips(t *testing.T) {
	in := Settings{Socket: "/run/s.sock", Timeout: "1.5s", LogLevel: "debug", ExcludeNamespaces: []string{"kube-system"}, Status: StatusAgent}
	b, err := json.Marshal(in.Map())
	if err != nil {
		t.Fatal(err)
	}
	var out Settings
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(in, out) {
		t.Fatalf("round trip through the entry changed the settings:\n in %+v\nout %+v", in, out)
	}
	p, err := out.Parse()
	if err != nil {
		t.Fatal(err)
	}
	if p.Timeout != 1500*time.Millisecond || p.Socket != in.Socket || p.LogLevel.String() != "DEBUG" || p.Status != StatusAgent {
		t.Errorf("parsed %+v", p)
	}
}

func TestParseDefaults(t *testing.T) {
	p, err := Settings{}.Parse()
	if err != nil {
		t.Fatal(err)
	}
	if p.Socket != DefaultSocket || p.Timeout != DefaultTimeout || p.LogLevel != DefaultLogLevel || p.Status != StatusConfig {
		t.Errorf("defaults: %+v", p)
	}
}

func TestParseRejects(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    Settings
		want string
	}{
		{"relative socket", Settings{Socket: "agent.sock"}, "absolute"},
		{"socket too long", Settings{Socket: "/" + strings.Repeat("s", maxSocketPath)}, "unix socket"},
		{"garbage timeout", Settings{Timeout: "soon"}, "timeout"},
		{"zero timeout", Settings{Timeout: "0s"}, "(0, 1m0s]"},
		{"negative timeout", Settings{Timeout: "-1s"}, "(0, 1m0s]"},
		{"timeout over the cap", Settings{Timeout: "90s"}, "(0, 1m0s]"},
		{"bad log level", Settings{LogLevel: "loud"}, "logLevel"},
		{"unknown status", Settings{Status: "kubelet"}, "must be config or agent"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := tc.s.Parse(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Parse(%+v) = %v, want an error containing %q", tc.s, err, tc.want)
			}
		})
	}
	if err := CheckSocket("/" + strings.Repeat("s", maxSocketPath-1)); err != nil {
		t.Errorf("a socket path of exactly %d bytes refused: %v", maxSocketPath, err)
	}
	if err := CheckTimeout(MaxTimeout); err != nil {
		t.Errorf("the maximum timeout itself refused: %v", err)
	}
}
