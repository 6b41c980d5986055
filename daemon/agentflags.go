package main

import (
	"errors"
	"flag"
	"io"
	"strings"

	"github.com/sluicemesh/sluice/daemon/cli"
	"github.com/sluicemesh/sluice/daemon/sysdump"
)

// agentFlags is cli.AgentFlags over the agent's own flag set: the operator
// commands (sysdump) read a running agent's configuration through it.
func agentFlags(args []string, getenv func(string) string) (*cli.AgentConfig, []cli.FlagRow, error) {
	c := &config{}
	fs := flag.NewFlagSet("sluice-agent", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c.nodeFlags(fs)
	c.policyFlags(fs, getenv)
	err := errors.Join(envDefaults(fs, getenv), fs.Parse(args))
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var rows []cli.FlagRow
	fs.VisitAll(func(f *flag.Flag) {
		r := cli.FlagRow{Name: f.Name, Value: f.Value.String(), Source: "default"}
		switch env := envName(f.Name); {
		case set[f.Name] && getenv(env) != "" && !slicesContainsFlag(args, f.Name):
			r.Source = "env " + env
		case set[f.Name]:
			r.Source = "command line"
		}
		if sysdump.SecretName(f.Name) {
			r.Value = sysdump.Redacted
		}
		rows = append(rows, r)
	})
	return &cli.AgentConfig{NodeName: c.nodeName, PodName: c.podName, PodNamespace: c.podNamespace,
		StateDir: c.stateDir, HealthAddr: c.healthAddr, LogLevel: c.logLevel,
		Install: c.install, Chained: c.chained, Ambient: c.ambient, Trigger: c.trigger,
		CNIConfName: c.cniConfName, CNIConfDir: c.cniConfDir, CNIBinDirs: splitList(c.cniBinDirs),
		PluginBinary: c.pluginBinary}, rows, err
}

// slicesContainsFlag reports whether args set the flag (-name, --name,
// with or without =value).
func slicesContainsFlag(args []string, name string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		a = strings.TrimLeft(a, "-")
		if a == name || strings.HasPrefix(a, name+"=") {
			return true
		}
	}
	return false
}
