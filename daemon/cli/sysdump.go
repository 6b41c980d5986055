package cli

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	sluicev1 "github.com/sluicemesh/sluice/api/sluice/v1"
	"github.com/sluicemesh/sluice/daemon/sysdump"
)

// `sluice-agent sysdump` writes one tar.gz a person can attach to a ticket:
// the agent's answers over its socket and health port, and the files it
// keeps on the node, read as the running agent sees them. The agent is
// found through its socket (SO_PEERCRED names its pid), and its own
// command line and environment, parsed by the agent's flag set, say where
// its files are, so the same command works in the agent's pod (where the
// chart's args are not in the exec's environment) and on the node. What a
// section could not get is a note in the archive, never a failed dump.
const sysdumpUsage = `usage: sluice-agent sysdump [--socket PATH] [-o FILE|-] [--max-size BYTES] [--max-file-size BYTES] [--pod-log-dir DIR] [--timeout D] [-- AGENT FLAGS]
  a support bundle (tar.gz): the agent's status, workloads and their rulesets, flags, health, metrics,
  the CNI config dir, the installer's files, the journal, the agent's logs and versions; secrets redacted.
  -o - writes it to stdout (kubectl exec ds/sluice-agent -- sluice-agent sysdump -o - > dump.tgz).
  AGENT FLAGS stand in for the running agent's when it cannot be asked.`

type sysdumpFlags struct {
	socket    string
	output    string
	lim       sysdump.Limits
	podLogDir string
	timeout   time.Duration
}

func runSysdump(args []string, getenv func(string) string, out, errOut io.Writer, flags AgentFlags) int {
	opts, agentArgs, err := parseSysdump(args, getenv, errOut)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(errOut, "sluice-agent sysdump: %v (see sluice-agent sysdump --help)\n", err)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), opts.timeout)
	defer cancel()
	ag := findAgent(opts.socket, agentArgs, getenv, flags)
	now := time.Now()
	node := ag.cfg.NodeName
	if node == "" {
		node, _ = os.Hostname()
	}
	top := "sluice-sysdump-" + safeName(node) + "-" + now.UTC().Format("20060102-150405")
	w, name, err := sysdumpOutput(opts.output, top, out)
	if err != nil {
		fmt.Fprintf(errOut, "sluice-agent sysdump: %v\n", err)
		return 1
	}
	a := sysdump.NewArchive(w, top, opts.lim, now)
	collect(ctx, a, ag, opts)
	err = a.Close(sysdumpReadme)
	if c, ok := w.(io.Closer); ok && w != out {
		err = errors.Join(err, c.Close())
	}
	if err != nil {
		fmt.Fprintf(errOut, "sluice-agent sysdump: writing %s: %v\n", name, err)
		return 1
	}
	for _, n := range a.Notes() {
		fmt.Fprintf(errOut, "sluice-agent sysdump: note: %s\n", printable(n))
	}
	fmt.Fprintf(errOut, "sluice-agent sysdump: wrote %s\n", name)
	return 0
}

func parseSysdump(args []string, getenv func(string) string, errOut io.Writer) (sysdumpFlags, []string, error) {
	opts := sysdumpFlags{socket: defaultSocket, lim: sysdump.DefaultLimits, podLogDir: "/var/log/pods", timeout: 2 * time.Minute}
	if v := getenv("SLUICE_SOCKET"); v != "" {
		opts.socket = v
	}
	fs := flag.NewFlagSet("sluice-agent sysdump", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&opts.socket, "socket", opts.socket, "the agent's socket (env SLUICE_SOCKET)")
	for _, n := range []string{"o", "output"} {
		fs.StringVar(&opts.output, n, "", "where the archive goes: a new file, or - for stdout; empty: ./<archive name>.tar.gz")
	}
	fs.Var((*byteSize)(&opts.lim.Total), "max-size", "the archive's cap: bytes, or with Ki, Mi, Gi")
	fs.Var((*byteSize)(&opts.lim.File), "max-file-size", "each file's cap: bytes, or with Ki, Mi, Gi (a log keeps its end)")
	fs.StringVar(&opts.podLogDir, "pod-log-dir", opts.podLogDir, "the kubelet's pod log dir, where the agent's container logs are (read when this runs on the node)")
	fs.DurationVar(&opts.timeout, "timeout", opts.timeout, "how long the whole dump may take")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(errOut, sysdumpUsage)
			fs.SetOutput(errOut)
			fs.PrintDefaults()
		}
		return opts, nil, err
	}
	if opts.lim.File <= 0 || opts.lim.Total <= 0 || opts.timeout <= 0 {
		return opts, nil, errors.New("--max-size, --max-file-size and --timeout must be positive")
	}
	abs, err := filepath.Abs(opts.socket)
	if err != nil {
		return opts, nil, fmt.Errorf("--socket %q: %w", opts.socket, err)
	}
	opts.socket = abs
	return opts, fs.Args(), nil
}

// byteSize is a flag of bytes: 1048576, 1024Ki, 1Mi.
type byteSize int64

func (b *byteSize) String() string { return strconv.FormatInt(int64(*b), 10) }

func (b *byteSize) Set(s string) error {
	mult := int64(1)
	for suffix, m := range map[string]int64{"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30} {
		if strings.HasSuffix(s, suffix) {
			s, mult = strings.TrimSuffix(s, suffix), m
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 || n > (1<<40)/mult {
		return fmt.Errorf("want a positive size such as 64Mi")
	}
	*b = byteSize(n * mult)
	return nil
}

// sysdumpOutput opens where the archive goes. A file is created new (never
// over something there) and 0600: it describes the node.
func sysdumpOutput(output, top string, stdout io.Writer) (io.Writer, string, error) {
	if output == "-" {
		if f, ok := stdout.(*os.File); ok {
			if _, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS); err == nil {
				return nil, "", errors.New("-o -: stdout is a terminal; redirect it to a file")
			}
		}
		return stdout, "stdout", nil
	}
	if output == "" {
		output = top + ".tar.gz"
	}
	f, err := os.OpenFile(output, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, unix.EROFS) {
		return nil, "", fmt.Errorf("%w (in the agent's pod, whose root is read-only: -o - > dump.tgz)", err)
	}
	if err != nil {
		return nil, "", err
	}
	return f, output, nil
}

// agentView is the running agent as the dump sees it.
type agentView struct {
	pid  int    // 0: not found (not reachable, or in a pid namespace not ours)
	root string // its root, /proc/<pid>/root; "" is ours
	// argv and env are its command line and environment; with no pid, the
	// flags after -- and this process's env.
	argv   []string
	env    []string
	cfg    *AgentConfig
	rows   []FlagRow
	notes  []string
	socket string
	conn   *grpc.ClientConn
	c      clients
}

// findAgent asks the kernel who serves the socket and reads that process's
// flags. Everything it cannot learn becomes a note and a default.
func findAgent(socket string, fallbackArgs []string, getenv func(string) string, flags AgentFlags) *agentView {
	ag := &agentView{socket: socket}
	pid, err := socketPeer(socket)
	switch {
	case err != nil:
		ag.note("the agent's socket %s: %v; its files are looked for where its flags after -- (or the defaults) say", socket, err)
	case pid == 0:
		ag.note("the agent at %s runs in a pid namespace not visible here; its files are looked for where the defaults say", socket)
	default:
		argv, env, err := processArgs(pid)
		if err != nil {
			ag.note("the agent's command line (pid %d): %v", pid, err)
		} else {
			ag.pid, ag.root, ag.argv, ag.env = pid, "/proc/"+strconv.Itoa(pid)+"/root", argv, env
		}
	}
	args, lookup := fallbackArgs, getenv
	if ag.pid != 0 {
		args, lookup = ag.argv[1:], envLookup(ag.env)
	} else {
		ag.env = os.Environ()
	}
	cfg, rows, err := flags(args, lookup)
	if err != nil {
		ag.note("the agent's flags: %v", err)
	}
	ag.cfg, ag.rows = cfg, rows
	d := &recordingDialer{path: socket}
	conn, err := grpc.NewClient("passthrough:///agent", grpc.WithContextDialer(d.dial),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err == nil {
		ag.conn = conn
		ag.c = clients{cni: sluicev1.NewCNIClient(conn), debug: sluicev1.NewDebugClient(conn),
			why: func(err error) string { return describe(socket, d.err(), d.hungUp(), err) }}
	}
	return ag
}

func (ag *agentView) note(format string, args ...any) {
	ag.notes = append(ag.notes, fmt.Sprintf(format, args...))
}

// socketPeer is the pid of the process listening on the socket, as this
// process's pid namespace numbers it (0 when it cannot see it).
func socketPeer(socket string) (int, error) {
	conn, err := net.DialTimeout("unix", socket, callTimeout)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	raw, err := conn.(*net.UnixConn).SyscallConn()
	if err != nil {
		return 0, err
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return 0, err
	}
	if credErr != nil {
		return 0, fmt.Errorf("SO_PEERCRED: %w", credErr)
	}
	return int(cred.Pid), nil
}

// processArgs reads a process's argv and environment (root's, or the
// agent's own uid's, to read).
func processArgs(pid int) (argv, env []string, err error) {
	dir := "/proc/" + strconv.Itoa(pid)
	split := func(b []byte) []string {
		var out []string
		for _, s := range bytes.Split(bytes.TrimSuffix(b, []byte{0}), []byte{0}) {
			out = append(out, string(s))
		}
		return out
	}
	cmdline, err := readCapped(dir+"/cmdline", 1<<20)
	if err != nil {
		return nil, nil, err
	}
	environ, err := readCapped(dir+"/environ", 1<<20)
	if err != nil {
		return nil, nil, err
	}
	argv = split(cmdline)
	if len(argv) == 0 || argv[0] == "" {
		return nil, nil, fmt.Errorf("%s/cmdline is empty", dir)
	}
	return argv, split(environ), nil
}

func readCapped(path string, max int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, max))
}

func envLookup(env []string) func(string) string {
	m := map[string]string{}
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			m[k] = v
		}
	}
	return func(k string) string { return m[k] }
}

// safeName keeps a node name fit for a file name.
func safeName(s string) string {
	s = strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '.' || r == '_' {
			return r
		}
		return '_'
	}, s)
	if s == "" || strings.Trim(s, ".") == "" {
		return "node"
	}
	return s
}
