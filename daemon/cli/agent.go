package cli

// AgentConfig is what the commands read of the agent's configuration:
// where its files, sockets and logs are. The agent's main package fills it
// from the agent's own flag set (AgentFlags), so the CLI never parses the
// agent's flags itself and cannot drift from them.
type AgentConfig struct {
	NodeName, PodName, PodNamespace string
	StateDir, HealthAddr, LogLevel  string
	Install, Chained, Ambient       bool
	Trigger                         string
	CNIConfName, CNIConfDir         string
	CNIBinDirs                      []string
	PluginBinary                    string
}

// FlagRow is one of the agent's effective flags and where its value came
// from: "default", "command line" or "env NAME".
type FlagRow struct{ Name, Value, Source string }

// AgentFlags parses an agent's argv and env with the agent's own flag set,
// without its start-up checks (a dump is wanted most when the
// configuration is wrong): what parsed before an error is kept, secrets
// redacted in the rows.
type AgentFlags func(args []string, getenv func(string) string) (*AgentConfig, []FlagRow, error)
