package main

import (
	"io"
	"strings"
	"testing"
	"time"
)

func TestConfigEnvAndFlags(t *testing.T) {
	env := map[string]string{"SLUICE_SOCKET": "/env.sock", "SLUICE_RESYNC_INTERVAL": "5s", "SLUICE_LOG_LEVEL": "debug"}
	c, err := parseConfig([]string{"--socket", "/flag.sock"}, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.socket != "/flag.sock" {
		t.Errorf("flag should win over env: %q", c.socket)
	}
	if c.resync != 5*time.Second || c.logLevel != "debug" {
		t.Errorf("env not applied: %+v", c)
	}
	if c.healthAddr != ":9890" || c.netnsRoots != "/var/run/netns,/run/netns,/proc" || c.maxInflight != 64 {
		t.Errorf("defaults: %+v", c)
	}
}

func TestConfigRejects(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{env: map[string]string{"SLUICE_RESYNC_INTERVAL": "often"}, want: "SLUICE_RESYNC_INTERVAL"},
		{args: []string{"--max-inflight", "0"}, want: "max-inflight"},
		{args: []string{"--resync-interval", "-1s"}, want: "resync-interval"},
		{args: []string{"stray"}, want: "unexpected"},
		{args: []string{"--no-such-flag"}, want: "no-such-flag"},
	} {
		_, err := parseConfig(tc.args, func(k string) string { return tc.env[k] }, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v %v: err = %v, want %q", tc.args, tc.env, err, tc.want)
		}
	}
}

func TestHelpNamesEveryEnvVar(t *testing.T) {
	var out strings.Builder
	parseConfig([]string{"--help"}, func(string) string { return "" }, &out)
	for _, env := range []string{"SLUICE_SOCKET", "SLUICE_HEALTH_ADDR", "SLUICE_STATE_DIR", "SLUICE_NETNS_ROOTS", "SLUICE_HOST_PROC", "SLUICE_KUBECONFIG", "SLUICE_DEFAULT_MODE", "SLUICE_ALLOWED_UIDS"} {
		if !strings.Contains(out.String(), env) {
			t.Errorf("--help lacks %s", env)
		}
	}
}

func TestUIDsAndLogger(t *testing.T) {
	c := &config{allowedUIDs: "0, 1000", logLevel: "warn", logFormat: "json"}
	uids, err := c.uids()
	if err != nil || len(uids) != 2 || uids[1] != 1000 {
		t.Errorf("uids = %v %v", uids, err)
	}
	if _, err := c.logger(io.Discard); err != nil {
		t.Error(err)
	}
	c.allowedUIDs, c.logFormat = "root", "xml"
	if _, err := c.uids(); err == nil {
		t.Error("uid 'root' accepted")
	}
	if _, err := c.logger(io.Discard); err == nil {
		t.Error("log format xml accepted")
	}
}
