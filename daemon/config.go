package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluicemesh/sluice/daemon/cli"
	"github.com/sluicemesh/sluice/daemon/nodetaint"
	"github.com/sluicemesh/sluice/daemon/policy"
	"github.com/sluicemesh/sluice/daemon/redirect"
	"github.com/sluicemesh/sluice/daemon/repair"
	"github.com/sluicemesh/sluice/internal/pluginconf"
)

// config is every flag of sluice-agent. Each flag also reads SLUICE_<NAME>
// (dashes to underscores, upper case); the command line wins over the env.
type config struct {
	socket       string
	healthAddr   string
	stateDir     string
	netnsRoots   string
	hostProc     string
	kubeconfig   string
	defaultMode  string
	allowedUIDs  string
	logLevel     string
	logFormat    string
	drain        time.Duration
	resync       time.Duration
	verify       time.Duration
	standaloneSA string
	maxInflight  int

	install            bool
	uninstallOnExit    string
	cleanupOnUninstall bool
	cniBinDirs         string
	cniConfDir         string
	cniConfName        string
	chained            bool
	removeIstioCNI     bool
	cniNetworkName     string
	pluginBinary       string
	pluginTimeout      time.Duration
	pluginLogLevel     string
	pluginStatus       string
	excludeNamespaces  string
	startupTaint       string
	nodeCondition      string

	nodeName     string
	podName      string
	podNamespace string
	repairMode   string
	// istioTakeover adopts sidecar pods istio-cni captured.
	istioTakeover bool
	repairLabel   string

	ambient           bool
	ambientDNSCapture bool
	ambientSelectors  string
	ztunnelSocket     string
	ztunnelWait       time.Duration
	probeSNATIPv4     string
	probeSNATIPv6     string
	probeSNATUID      probeUIDFlag
	hostNetns         string

	trigger   string
	nriSocket string

	checkConfig bool
}

// What enrols a pod (--trigger): the CNI plugin's ADD, the runtime's NRI
// RunPodSandbox event, or both (migration; each is idempotent).
const (
	triggerCNI  = "cni"
	triggerNRI  = "nri"
	triggerBoth = "both"
)

func parseConfig(args []string, getenv func(string) string, stderr io.Writer) (*config, error) {
	c := &config{}
	fs := flag.NewFlagSet("sluice-agent", flag.ContinueOnError)
	// A wrong flag is one line naming it (main prints it): the whole usage
	// in a crash-looping pod's log buries the line that matters.
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	c.nodeFlags(fs)
	c.policyFlags(fs, getenv)
	if err := envDefaults(fs, getenv); err != nil {
		return nil, err
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printUsage(fs, stderr)
		}
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	if err := c.validateValues(); err != nil {
		return nil, err
	}
	// One validation, on every path: the agent that starts is the one
	// --check-config approved.
	if err := c.check(); err != nil {
		return nil, fmt.Errorf("invalid configuration: %w", err)
	}
	return c, nil
}

// nodeFlags are the agent's own: its socket, state, health, logs, and what
// it installs on the node.
func (c *config) nodeFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.socket, "socket", "/var/run/sluice/agent.sock", "gRPC unix socket the plugin calls (dir 0700, socket 0600)")
	fs.StringVar(&c.healthAddr, "health-addr", ":9890", "HTTP address of /healthz, /readyz and /metrics: IP:PORT, [IPv6]:PORT, or :PORT for every interface; the chart binds it to the node IP")
	fs.StringVar(&c.stateDir, "state-dir", "/var/run/sluice/state", "directory of the workload journal; tmpfs is right: pod netns do not survive a reboot either")
	fs.StringVar(&c.netnsRoots, "netns-roots", "/var/run/netns,/run/netns,/proc", "comma-separated directories a pod netns path may lie under")
	fs.StringVar(&c.hostProc, "host-proc", "/proc", "the host's /proc as mounted for the agent; /proc/<pid>/ns/net paths are read through it")
	fs.StringVar(&c.kubeconfig, "kubeconfig", "", "kubeconfig for pod policy; empty runs standalone with --default-mode for every pod")
	fs.StringVar(&c.defaultMode, "default-mode", "sidecar", "capture mode in standalone mode: sidecar, or ambient (with --ambient)")
	fs.StringVar(&c.standaloneSA, "standalone-service-account", policy.DefaultServiceAccount, "standalone: the service account every pod is given to ztunnel, which matches a workload by name, namespace and service account as istiod publishes it")
	fs.StringVar(&c.allowedUIDs, "allowed-uids", "0", "comma-separated uids allowed to call the socket; must include 0, the runtime's")
	fs.StringVar(&c.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&c.logFormat, "log-format", "text", "text or json")
	fs.DurationVar(&c.drain, "drain-timeout", 10*time.Second, "how long SIGTERM waits for in-flight calls; 0 cuts them at once")
	fs.DurationVar(&c.resync, "resync-interval", 60*time.Second, "how often every enrolled netns's ruleset is read back in full and reasserted on drift, whatever its nftables generation")
	fs.DurationVar(&c.verify, "verify-interval", 5*time.Second, "how often every enrolled netns is verified on the cheap path (nftables generation, routes) and reasserted on drift: lost capture is back within 1.5 times this")
	fs.IntVar(&c.maxInflight, "max-inflight", 64, "concurrent ADDs; more wait for a slot until their deadline")
	fs.BoolVar(&c.install, "install", true, "install the plugin binary and its conflist entry, and keep them in place")
	fs.BoolVar(&c.cleanupOnUninstall, "cleanup-on-uninstall", false, "when the agent leaves the node (--uninstall-on-exit decided so), also remove every pod's capture rules, the plugin, the journal and the sockets, as sluice-agent cleanup does: running pods go on uncaptured")
	fs.StringVar(&c.uninstallOnExit, "uninstall-on-exit", "auto", "remove the conflist entry on SIGTERM: true, false, or auto (true standalone; in Kubernetes only when the agent's DaemonSet is being deleted or no longer selects this node)")
	fs.StringVar(&c.cniBinDirs, "cni-bin-dir", "/opt/cni/bin", "comma-separated directories the plugin binary is installed into")
	fs.StringVar(&c.cniConfDir, "cni-conf-dir", "/etc/cni/net.d", "directory of the CNI configs the runtime reads")
	fs.StringVar(&c.cniConfName, "cni-conf-name", "", "primary config file to chain from; empty: the lexically first valid one")
	fs.BoolVar(&c.chained, "chained", true, "chain sluice after the primary CNI in <primary stem>-sluice.conflist, which sorts just before the primary's file (never edited); false writes an own YYY-sluice.conflist, which sorts last (Multus, OpenShift)")
	fs.StringVar(&c.cniNetworkName, "cni-network-name", "sluice", "network name of the non-chained YYY-sluice.conflist; Multus matches it against a NetworkAttachmentDefinition without config of its own")
	fs.BoolVar(&c.removeIstioCNI, "remove-istio-cni-entry", false, "remove a leftover istio-cni entry from the primary conflist (migration from istio-cni); false only warns")
	fs.StringVar(&c.pluginBinary, "plugin-binary", "", "the sluice plugin to install; empty: 'sluice' next to this executable")
	fs.DurationVar(&c.pluginTimeout, "plugin-timeout", pluginconf.DefaultTimeout, "the plugin's deadline for each call, written into the conflist entry")
	fs.StringVar(&c.pluginLogLevel, "plugin-log-level", "warn", "the plugin's stderr level (debug, info, warn, error), written into the conflist entry: the runtime keeps that stderr in its own log for every pod")
	fs.StringVar(&c.pluginStatus, "plugin-status", pluginconf.DefaultStatus, "what the plugin's CNI STATUS reports, written into the conflist entry: config (ready once the entry parses; an agent outage leaves the node Ready) or agent (not ready while the agent is not: with containerd 2.x the node goes NotReady)")
}

// policyFlags decide which pods are captured and how, and the agent's
// identity in Kubernetes.
func (c *config) policyFlags(fs *flag.FlagSet, getenv func(string) string) {
	fs.StringVar(&c.excludeNamespaces, "exclude-namespaces", "kube-system", "comma-separated namespaces never captured; the plugin skips them even while the agent is down")
	fs.StringVar(&c.nodeName, "node-name", getenv("NODE_NAME"), "this node's name: only its pods are watched (default $NODE_NAME)")
	fs.StringVar(&c.podName, "pod-name", getenv("POD_NAME"), "the agent's own pod: to find its DaemonSet on exit, and its name less the random suffix is the prefix of the agent pods never captured (default $POD_NAME)")
	fs.StringVar(&c.podNamespace, "pod-namespace", getenv("POD_NAMESPACE"), "the agent's own namespace, where its pods (by --pod-name prefix) are never captured (default $POD_NAMESPACE)")
	fs.StringVar(&c.repairMode, "repair-mode", "apply", "pods found running uncaptured: apply (program their rules), label (set --repair-label), delete (evict through the Eviction API, which honours PodDisruptionBudgets) or off (log, Event and metric only)")
	fs.BoolVar(&c.istioTakeover, "istio-takeover", false, "take over running sidecar pods istio-cni captured: sluice's rules in, Istio's removed (docs/adopt-istio-cni.md); false leaves them to Istio. Ambient pods istio-cni enrolled are always adopted")
	fs.StringVar(&c.repairLabel, "repair-label", "sluice.dev/uncaptured=true", "KEY=VALUE that --repair-mode=label sets, e.g. istio-cni's cni.istio.io/uninitialized=true")
	fs.BoolVar(&c.ambient, "ambient", false, "enroll pods labelled istio.io/dataplane-mode=ambient and hand them to ztunnel")
	fs.BoolVar(&c.ambientDNSCapture, "ambient-dns-capture", true, "capture ambient pods' DNS to ztunnel (per pod: ambient.istio.io/dns-capture)")
	fs.StringVar(&c.ambientSelectors, "ambient-enablement-selectors", "", "which pods are ambient: Istio's enablement selectors (YAML or JSON list of {podSelector, namespaceSelector}, as the istio-cni chart's ambient.enablementSelectors); empty: Istio's chart default (pod label istio.io/dataplane-mode=ambient, or that namespace label and a pod label other than none)")
	// Istio's node agent's env names are read too (under the SLUICE_ ones),
	// so an istio-cni DaemonSet's env carries over.
	fs.StringVar(&c.probeSNATIPv4, "probe-snat-ipv4", envOr(getenv, "HOST_PROBE_SNAT_IP", redirect.DefaultProbeSNATIPv4.String()), "source address kubelet probes to ambient pods are SNATed to, which their in-pod rules let past ztunnel (istio-cni's HOST_PROBE_SNAT_IP is read too)")
	fs.StringVar(&c.probeSNATIPv6, "probe-snat-ipv6", envOr(getenv, "HOST_PROBE_SNAT_IPV6", redirect.DefaultProbeSNATIPv6.String()), "the same for IPv6 (istio-cni's HOST_PROBE_SNAT_IPV6 is read too)")
	c.probeSNATUID = probeUIDFlag{probeUIDAuto}
	fs.Var(&c.probeSNATUID, "probe-snat-uid", "whose TCP from the node to an ambient pod is SNATed to the probe address, past ztunnel: auto (the uid of the kubelet running in the host netns, read through --host-proc and followed across its restarts; none until one is found), a uid, or none (every probe is captured)")
	fs.StringVar(&c.ztunnelSocket, "ztunnel-socket", "/var/run/ztunnel/ztunnel.sock", "the ZDS socket ztunnel connects to")
	fs.DurationVar(&c.ztunnelWait, "ztunnel-connect-wait", 5*time.Second, "how long an ambient pod's ADD that finds no ztunnel connected waits for one (a ztunnel restart) before it fails for the runtime to retry; at most 16 wait at once; 0 fails at once")
	fs.StringVar(&c.hostNetns, "host-netns", "", "netns path of the host side (ambient probe SNAT table); empty: the agent's own")
	fs.StringVar(&c.trigger, "trigger", triggerCNI, "what enrols a pod: cni (the chained plugin's ADD), nri (the runtime's NRI pod events; no conflist entry is installed) or both (migration)")
	fs.StringVar(&c.nriSocket, "nri-socket", "/var/run/nri/nri.sock", "the runtime's NRI socket, with --trigger nri or both")
	fs.StringVar(&c.startupTaint, "startup-taint", nodetaint.DefaultKey, "the NoSchedule taint key the agent removes from its own node once ready (the node registers with it, so no pod lands before the agent can capture it); empty: none removed")
	fs.StringVar(&c.nodeCondition, "node-condition", "", "the condition type the agent keeps on its own Node's status (domain-prefixed, e.g. sluice.dev/MeshReady): True while it is ready (and, with --ambient, ztunnel is connected), False with a reason naming what is missing, for a NodeReadinessRule or the platform's tooling; empty: none written")
	fs.BoolVar(&c.checkConfig, "check-config", false, "validate flags and env without touching the node (the same checks every start runs), print 'config ok' and exit 0; invalid: exit 2")
}

func printUsage(fs *flag.FlagSet, w io.Writer) {
	fmt.Fprintln(w, "usage: sluice-agent [flags]   run the node agent")
	fmt.Fprintln(w, "       sluice-agent --version   print this binary's version")
	fmt.Fprintln(w, "       sluice-agent cleanup [flags]\n           with the agent stopped, remove what it put on the node (pods' rules, conflist entry, plugin, journal, sockets); the flags name where, as for the agent")
	fmt.Fprintln(w, "       sluice-agent migrate-values FILE|-\n           an istio-cni values file as the sluice chart's values (docs/migrate-from-istio-cni.md)")
	fmt.Fprintln(w, "       sluice-agent sysdump [-o FILE|-] [flags]\n           a support bundle of this node's agent, secrets redacted (docs/operations.md)")
	cli.PrintUsage(w)
	fmt.Fprintln(w, "\nflags (each also read from its env var; the command line wins):")
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
}

// envDefaults reads every flag's env var (SLUICE_...) before the command
// line, which wins; each flag's usage names its variable.
func envDefaults(fs *flag.FlagSet, getenv func(string) string) error {
	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		name := envName(f.Name)
		f.Usage += " (env " + name + ")"
		if v := getenv(name); v != "" && envErr == nil {
			if err := fs.Set(f.Name, v); err != nil {
				envErr = fmt.Errorf("%s=%q: %w", name, v, err)
			}
		}
	})
	return envErr
}

// validateValues checks what a flag's own type cannot: enumerations and
// bounds. check, which parseConfig runs next, checks the rest.
func (c *config) validateValues() error {
	if c.resync <= 0 {
		return fmt.Errorf("--resync-interval must be positive")
	}
	if c.verify <= 0 {
		return fmt.Errorf("--verify-interval must be positive")
	}
	if c.maxInflight <= 0 {
		return fmt.Errorf("--max-inflight must be positive")
	}
	if c.drain < 0 {
		return fmt.Errorf("--drain-timeout %v: negative; 0 cuts the calls in flight at once", c.drain)
	}
	switch c.uninstallOnExit {
	case "auto", "true", "false":
	default:
		return fmt.Errorf("--uninstall-on-exit %q: want true, false or auto", c.uninstallOnExit)
	}
	switch c.repairMode {
	case "apply", "label", "delete", "off":
	default:
		return fmt.Errorf("--repair-mode %q: want apply, label, delete or off", c.repairMode)
	}
	if _, err := repair.ParseLabel(c.repairLabel); err != nil {
		return fmt.Errorf("--repair-label: %w", err)
	}
	switch c.trigger {
	case triggerCNI, triggerNRI, triggerBoth:
	default:
		return fmt.Errorf("--trigger %q: want cni, nri or both", c.trigger)
	}
	if c.trigger != triggerCNI && !strings.HasPrefix(c.nriSocket, "/") {
		return fmt.Errorf("--nri-socket %q: not an absolute path", c.nriSocket)
	}
	if c.kubeconfig != "" && c.nodeName == "" {
		return fmt.Errorf("--node-name (or $NODE_NAME) is required with --kubeconfig")
	}
	return nil
}

// checkListeners checks the addresses and sockets the agent listens on or
// dials by the rules of the listener itself, so an address --check-config
// passes is one the agent can bind: net.Listen would take a service name,
// resolve a host name, and fail on a port past 65535 only at start.
func (c *config) checkListeners() []error {
	var errs []error
	if err := checkHostPort(c.healthAddr); err != nil {
		errs = append(errs, fmt.Errorf("--health-addr %q: %w", c.healthAddr, err))
	}
	socks := []flagValue{{"--ztunnel-socket", c.ztunnelSocket}}
	if c.trigger != triggerCNI {
		socks = append(socks, flagValue{"--nri-socket", c.nriSocket})
	}
	for _, f := range socks {
		// The plugin's socket rule is every unix socket's: absolute (a
		// relative path is reported with the other paths), and short
		// enough for sun_path.
		if err := pluginconf.CheckSocket(f.value); err != nil && strings.HasPrefix(f.value, "/") {
			errs = append(errs, fmt.Errorf("%s %q: %w", f.flag, f.value, err))
		}
	}
	return errs
}

// checkHostPort is the rule for an address the agent listens on: the host
// an IP address, or empty for every interface (a name would be resolved at
// each start, and may resolve elsewhere); the port a number up to 65535, 0
// letting the kernel pick a free one (tests: no probe could find it).
func checkHostPort(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if _, err := netip.ParseAddr(host); host != "" && err != nil {
		return fmt.Errorf("host %q is not an IP address (empty: every interface)", host)
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return fmt.Errorf("port %q is not a number from 0 to 65535", port)
	}
	return nil
}

// installs is whether the installer runs: with --trigger nri no conflist
// entry is wanted, so nothing is installed.
func (c *config) installs() bool {
	return c.install && c.trigger != triggerNRI
}

// envOr is getenv(name), or def when that is empty.
func envOr(getenv func(string) string, name, def string) string {
	if v := getenv(name); v != "" {
		return v
	}
	return def
}

func envName(flagName string) string {
	return "SLUICE_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

func (c *config) uids() ([]uint32, error) {
	var out []uint32
	for _, s := range splitList(c.allowedUIDs) {
		n, err := strconv.ParseUint(s, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("--allowed-uids: %q is not a uid", s)
		}
		out = append(out, uint32(n))
	}
	// The runtime execs the plugin as root: without 0 no ADD is ever
	// served, while /healthz stays green.
	if !slices.Contains(out, 0) {
		return nil, fmt.Errorf("--allowed-uids %q: must include uid 0, the container runtime's, which the plugin runs as", c.allowedUIDs)
	}
	return out, nil
}

func (c *config) logger(w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(c.logLevel)); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	opts := &slog.HandlerOptions{Level: level}
	switch c.logFormat {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", c.logFormat)
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// enablementSelectors is --ambient-enablement-selectors, or Istio's chart
// default when it is empty (a multi-line default would not fit --help).
func (c *config) enablementSelectors() string {
	if strings.TrimSpace(c.ambientSelectors) == "" {
		return policy.DefaultEnablementSelectors
	}
	return c.ambientSelectors
}
