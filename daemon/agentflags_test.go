package main

import "testing"

// Flags are reported with where their value came from, and a value set by
// env is told from one on the command line.
func TestSysdumpAgentFlagsSayTheirSource(t *testing.T) {
	env := map[string]string{"SLUICE_LOG_LEVEL": "debug", "SLUICE_STATE_DIR": "/env/state"}
	cfg, rows, err := agentFlags([]string{"--state-dir=/cli/state", "--ambient"}, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if cfg.StateDir != "/cli/state" || cfg.LogLevel != "debug" || !cfg.Ambient {
		t.Errorf("config: state %q, log level %q, ambient %v", cfg.StateDir, cfg.LogLevel, cfg.Ambient)
	}
	got := map[string]string{}
	for _, r := range rows {
		got[r.Name] = r.Value + " " + r.Source
	}
	for name, want := range map[string]string{"state-dir": "/cli/state command line", "log-level": "debug env SLUICE_LOG_LEVEL",
		"ambient": "true command line", "socket": "/var/run/sluice/agent.sock default"} {
		if got[name] != want {
			t.Errorf("--%s: %q, want %q", name, got[name], want)
		}
	}
}
