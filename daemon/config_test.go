package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"os"
	"reflect"
	"slices"
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

func TestCheck(t *testing.T) {
	ok, err := parseConfig([]string{"--kubeconfig", "in-cluster", "--node-name", "n1"}, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if err := ok.check(); err != nil {
		t.Errorf("defaults with in-cluster: %v", err)
	}
	_, err = parseConfig([]string{"--socket", "rel.sock", "--netns-roots", "/a,b", "--health-addr", "9890", "--default-mode", "x"}, func(string) string { return "" }, io.Discard)
	for _, want := range []string{"--socket", "--netns-roots", "--health-addr", "--default-mode"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("parseConfig = %v, want it to name %s", err, want)
		}
	}
	if _, err := parseConfig([]string{"--kubeconfig", "/k"}, func(string) string { return "" }, io.Discard); err == nil {
		t.Error("--kubeconfig without a node name accepted")
	}
	if c, err := parseConfig([]string{"--kubeconfig", "in-cluster"}, func(k string) string { return map[string]string{"NODE_NAME": "n9"}[k] }, io.Discard); err != nil || c.nodeName != "n9" {
		t.Errorf("NODE_NAME not used as --node-name default: %v %v", c, err)
	}
}

// TestConfigValidatedOnEveryPath: a flag the plugin would refuse in the
// entry the agent writes fails the agent's start, not every later ADD, DEL
// and STATUS; --check-config is the same parse, so it cannot be stricter.
func TestConfigValidatedOnEveryPath(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--plugin-timeout", "90s"}, "--plugin-timeout"},
		{[]string{"--plugin-timeout", "0s"}, "--plugin-timeout"},
		{[]string{"--plugin-timeout", "-1s"}, "--plugin-timeout"},
		{[]string{"--socket", "agent.sock"}, "--socket"},
		{[]string{"--socket", "/" + strings.Repeat("s", 200) + ".sock"}, "--socket"},
		{[]string{"--log-level", "loud"}, "--log-level"},
		{[]string{"--plugin-status", "kubelet"}, "--plugin-status"},
		{[]string{"--startup-taint", "not a key!"}, "--startup-taint"},
		{[]string{"--node-condition", "Ready"}, "--node-condition"},
		{[]string{"--node-condition", "sluice.dev/not a type"}, "--node-condition"},
		{[]string{"--ztunnel-connect-wait", "-1s"}, "--ztunnel-connect-wait"},
	} {
		for _, check := range []bool{false, true} {
			args := tc.args
			if check {
				args = append(args, "--check-config")
			}
			_, err := parseConfig(args, func(string) string { return "" }, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%v: err = %v, want it to name %s", args, err, tc.want)
			}
		}
	}
}

// TestEntryAcceptedByPlugin: the entry built from the flags parses with the
// rules the plugin applies.
func TestEntryAcceptedByPlugin(t *testing.T) {
	c, err := parseConfig([]string{"--plugin-timeout", "60s", "--socket", "/run/x/agent.sock"}, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.pluginSettings().Parse()
	if err != nil {
		t.Fatalf("the plugin refuses the agent's entry: %v", err)
	}
	if p.Timeout != 60*time.Second || p.Socket != "/run/x/agent.sock" {
		t.Errorf("entry parsed as %+v", p)
	}
}

func TestRemoveIstioCNIEntryFlag(t *testing.T) {
	c, err := parseConfig(nil, func(string) string { return "" }, io.Discard)
	if err != nil || c.removeIstioCNI {
		t.Fatalf("default: remove=%v err=%v, want warn-only", c.removeIstioCNI, err)
	}
	c, err = parseConfig(nil, func(k string) string { return map[string]string{"SLUICE_REMOVE_ISTIO_CNI_ENTRY": "true"}[k] }, io.Discard)
	if err != nil || !c.removeIstioCNI {
		t.Fatalf("env: remove=%v err=%v", c.removeIstioCNI, err)
	}
}

// TestInstallerFlagsValidated: the installer's own rules run at parse time
// too, so a start fails where --check-config would.
func TestInstallerFlagsValidated(t *testing.T) {
	for _, args := range [][]string{
		{"--cni-network-name", "bad name"},
		{"--cni-conf-name", "../x.conflist"},
		{"--cni-conf-name", "YYY-sluice.conflist"},
	} {
		if _, err := parseConfig(args, func(string) string { return "" }, io.Discard); err == nil || !strings.Contains(err.Error(), "installer flags") {
			t.Errorf("%v: err = %v, want the installer's refusal", args, err)
		}
	}
	if _, err := parseConfig([]string{"--install=false", "--cni-network-name", "bad name"}, func(string) string { return "" }, io.Discard); err != nil {
		t.Errorf("installer flags checked with --install=false: %v", err)
	}
}

func TestIstioTakeoverFlag(t *testing.T) {
	c, err := parseConfig(nil, func(string) string { return "" }, io.Discard)
	if err != nil || c.istioTakeover {
		t.Fatalf("default: takeover=%v err=%v, want off (pods left to Istio)", c.istioTakeover, err)
	}
	c, err = parseConfig(nil, func(k string) string { return map[string]string{"SLUICE_ISTIO_TAKEOVER": "true"}[k] }, io.Discard)
	if err != nil || !c.istioTakeover {
		t.Fatalf("env: takeover=%v err=%v", c.istioTakeover, err)
	}
	if _, err = parseConfig([]string{"--istio-takeover=maybe"}, func(string) string { return "" }, io.Discard); err == nil {
		t.Fatal("--istio-takeover=maybe accepted")
	}
}

// The probe SNAT addresses reach both sides, the host table and every
// ambient pod's rules (standalone and Kubernetes policy take ambientBase);
// an address of the wrong family stops the start.
func TestProbeSNATFlags(t *testing.T) {
	env := map[string]string{"SLUICE_PROBE_SNAT_IPV6": "fd00:9::9"}
	c, err := parseConfig([]string{"--probe-snat-ipv4", "169.254.9.9"}, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	spec, hc := c.ambientBase(), c.hostConfig()
	if spec.ProbeSNATIPv4.String() != "169.254.9.9" || hc.ProbeSNATIPv4 != spec.ProbeSNATIPv4 {
		t.Errorf("v4: spec %v, host %v", spec.ProbeSNATIPv4, hc.ProbeSNATIPv4)
	}
	if spec.ProbeSNATIPv6.String() != "fd00:9::9" || hc.ProbeSNATIPv6 != spec.ProbeSNATIPv6 {
		t.Errorf("v6: spec %v, host %v", spec.ProbeSNATIPv6, hc.ProbeSNATIPv6)
	}
	d, err := parseConfig(nil, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if got := d.ambientBase(); got.ProbeSNATIPv4.String() != "169.254.7.127" {
		t.Errorf("default v4 %v, want Istio's 169.254.7.127", got.ProbeSNATIPv4)
	}
	for _, args := range [][]string{
		{"--probe-snat-ipv4", "fd00::1"}, {"--probe-snat-ipv4", "nope"},
		{"--probe-snat-ipv6", "169.254.9.9"}, {"--probe-snat-ipv6", "::ffff:169.254.9.9"},
	} {
		if _, err := parseConfig(args, func(string) string { return "" }, io.Discard); err == nil || !strings.Contains(err.Error(), "probe-snat") {
			t.Errorf("%v: err %v, want a probe-snat error", args, err)
		}
	}
}

// A wrong flag or value is one line naming it, not the whole usage: in a
// crash-looping pod's log the usage buries the line that matters.
func TestWrongFlagIsOneLine(t *testing.T) {
	for _, tc := range []struct {
		args []string
		name string
	}{
		{[]string{"--no-such-flag"}, "-no-such-flag"},
		{[]string{"--resync-interval", "soon"}, "-resync-interval"},
		{[]string{"--install=maybe"}, "-install"},
	} {
		var stderr bytes.Buffer
		_, err := parseConfig(tc.args, func(string) string { return "" }, &stderr)
		if err == nil || !strings.Contains(err.Error(), tc.name) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%v: %v, want one line naming %s", tc.args, err, tc.name)
		}
		if stderr.Len() != 0 {
			t.Errorf("%v printed %d lines besides the error:\n%s", tc.args, strings.Count(stderr.String(), "\n"), stderr.String())
		}
	}
	var stderr bytes.Buffer
	if _, err := parseConfig([]string{"--help"}, func(string) string { return "" }, &stderr); !errors.Is(err, flag.ErrHelp) ||
		!strings.Contains(stderr.String(), "-resync-interval duration") {
		t.Errorf("--help: %v\n%s", err, stderr.String())
	}
}

// The plugin's level is its own (default warn): the agent's info level
// would put a line per pod into the runtime's log.
func TestPluginLogLevelIsItsOwn(t *testing.T) {
	none := func(string) string { return "" }
	c, err := parseConfig([]string{"--log-level", "info"}, none, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.pluginSettings().LogLevel; got != "warn" {
		t.Errorf("entry logLevel %q with --log-level info, want warn", got)
	}
	c, err = parseConfig([]string{"--plugin-log-level", "debug"}, none, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.pluginSettings().LogLevel; got != "debug" {
		t.Errorf("entry logLevel %q with --plugin-log-level debug", got)
	}
	if _, err := parseConfig([]string{"--plugin-log-level", "loud"}, none, io.Discard); err == nil {
		t.Error("--plugin-log-level loud accepted")
	}
}

// An allowed-uid list without 0 (an empty one included) serves no runtime:
// the runtime execs the plugin as root. It fails --check-config, in one
// line that says why, and a list with 0 passes.
func TestAllowedUIDsWithoutRootAreRefused(t *testing.T) {
	for _, uids := range []string{"", " , ", "1000", "1000,2000"} {
		_, err := parseConfig([]string{"--allowed-uids", uids}, func(string) string { return "" }, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "--allowed-uids") || !strings.Contains(err.Error(), "uid 0") || strings.Count(err.Error(), "\n") != 0 {
			t.Errorf("--allowed-uids %q: err = %v, want one line naming the flag and uid 0", uids, err)
		}
	}
	if _, err := parseConfig([]string{"--allowed-uids", "1000,0"}, func(string) string { return "" }, io.Discard); err != nil {
		t.Errorf("--allowed-uids 1000,0: %v", err)
	}
}

// Other values that passed --check-config and gave an agent that cannot
// serve: no netns root (the opener refuses to start), and the agent's
// socket and ztunnel's at one path (one listener takes the other's).
func TestUselessConfigsAreRefused(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--netns-roots", ""}, "--netns-roots"},
		{[]string{"--netns-roots", " , "}, "--netns-roots"},
		{[]string{"--ambient", "--default-mode", "ambient", "--socket", "/run/s/a.sock", "--ztunnel-socket", "/run/s/a.sock"}, "--ztunnel-socket"},
	} {
		_, err := parseConfig(tc.args, func(string) string { return "" }, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: err = %v, want it to name %s", tc.args, err, tc.want)
		}
	}
}

// TestReadmeEntryIsTheAgentsDefault: README's example conflist entry is
// the one the agent writes with its default flags.
func TestReadmeEntryIsTheAgentsDefault(t *testing.T) {
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var line string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, `{"type": "sluice"`) {
			line = l
		}
	}
	var readme map[string]any
	if err := json.Unmarshal([]byte(line), &readme); err != nil {
		t.Fatalf("README's entry %q: %v", line, err)
	}
	c, err := parseConfig(nil, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := c.pluginSettings().Map()
	want["type"] = "sluice"
	wb, _ := json.Marshal(want)
	var wantJSON map[string]any
	_ = json.Unmarshal(wb, &wantJSON)
	if !reflect.DeepEqual(readme, wantJSON) {
		t.Errorf("README's entry:\n%s\nthe agent writes with its defaults:\n%s", line, wb)
	}
}

// TestListenAddressesAreCheckedAsTheListenerWould: an address or socket
// path --check-config passes is one the agent can listen on or dial. Each
// of these passed the check and failed (or listened somewhere else) only
// when the agent started: a port past 65535, a service or host name, a
// port-less address (":" listens on a random port), a socket path longer
// than sun_path; a negative drain cut every call at once.
func TestListenAddressesAreCheckedAsTheListenerWould(t *testing.T) {
	long := "/run/" + strings.Repeat("z", 110) + ".sock"
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--health-addr", "0.0.0.0:99999"}, "--health-addr"},
		{[]string{"--health-addr", ":65536"}, "--health-addr"},
		{[]string{"--health-addr", ":-1"}, "--health-addr"},
		{[]string{"--health-addr", ":http"}, "--health-addr"},
		{[]string{"--health-addr", ":"}, "--health-addr"},
		{[]string{"--health-addr", "localhost:9890"}, "--health-addr"},
		{[]string{"--health-addr", "node-1.example:9890"}, "--health-addr"},
		{[]string{"--health-addr", "[$(HOST_IP)]:9890"}, "--health-addr"},
		{[]string{"--health-addr", "10.0.0.300:9890"}, "--health-addr"},
		{[]string{"--ztunnel-socket", long}, "--ztunnel-socket"},
		{[]string{"--trigger", "nri", "--nri-socket", long}, "--nri-socket"},
		{[]string{"--drain-timeout", "-1s"}, "--drain-timeout"},
	} {
		for _, check := range []bool{false, true} {
			args := tc.args
			if check {
				args = append(slices.Clone(args), "--check-config")
			}
			_, err := parseConfig(args, func(string) string { return "" }, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%q: err = %v, want it to name %s", args, err, tc.want)
			}
		}
	}
	for _, addr := range []string{":9890", "0.0.0.0:9890", "[10.0.0.1]:9890", "[::]:9890", "[fd00::1]:19890", "[fe80::1%eth0]:9890", "127.0.0.1:0", ":65535"} {
		if _, err := parseConfig([]string{"--health-addr", addr}, func(string) string { return "" }, io.Discard); err != nil {
			t.Errorf("--health-addr %q refused: %v", addr, err)
		}
	}
	if _, err := parseConfig([]string{"--drain-timeout", "0s"}, func(string) string { return "" }, io.Discard); err != nil {
		t.Errorf("--drain-timeout 0s refused: %v", err)
	}
}
