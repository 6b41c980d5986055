package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	sluicev1 "github.com/sluicemesh/sluice/api/sluice/v1"
)

// The common on-call checks need no extra tool: each command reads the
// local socket and prints what an operator asks first, as a table or, with
// -o json|yaml, as data for scripts.
type command struct {
	usage string // arguments, for --help
	help  string
	args  int // positional arguments it takes
	// run asks the agent and returns what to print: a view with a table
	// form, which -o json|yaml marshals instead.
	run func(c clients, args []string) (view, error)
}

// clients are the agent's services over one connection.
type clients struct {
	cni    sluicev1.CNIClient
	debug  sluicev1.DebugClient
	ifName string // --if, for get
	client bool   // --client, for version
	// why says what a failed call means, in words a person can act on.
	why func(error) string
}

var commands = map[string]command{
	"status":    {"", "readiness, version, the ztunnel link and workload counts; exits 1 when the agent is not ready", 0, getStatus},
	"workloads": {"", "the enrolled attachments; the POD or CONTAINER column is what get accepts", 0, getWorkloads},
	"get":       {"POD|CONTAINER", "one enrolled attachment: its ruleset as nft text and whether the kernel drifted (POD is namespace/name; CONTAINER an id or a prefix)", 1, getWorkload},
	"explain":   {"NAMESPACE/NAME", "what an ADD would do for the pod and why, touching nothing", 1, getExplain},
	"version":   {"", "this binary's version and the running agent's; succeeds when no agent answers (--client: this binary's only)", 0, getVersion},
}

// defaultSocket is where the agent listens unless --socket says otherwise.
const defaultSocket = "/var/run/sluice/agent.sock"

// cliFlags are a command's options.
type cliFlags struct {
	socket string
	output string
}

// Run runs the command args[0] names with the rest; flags reads the
// agent's own flags (sysdump).
func Run(args []string, getenv func(string) string, out, errOut io.Writer, flags AgentFlags) int {
	return runCommand(args[0], args[1:], getenv, out, errOut, flags)
}

// runCommand runs one command and returns its exit code: 0 done, 1 the
// agent could not be asked or is not ready, 2 a usage error.
func runCommand(name string, args []string, getenv func(string) string, out, errOut io.Writer, flags AgentFlags) int {
	if name == "sysdump" {
		return runSysdump(args, getenv, out, errOut, flags)
	}
	cmd := commands[name]
	c := clients{}
	opts, rest, err := parseCommand(name, cmd, &c, args, getenv, errOut)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(errOut, "sluice-agent %s: %v (see sluice-agent %s --help)\n", name, err, name)
		return 2
	}
	d := &recordingDialer{path: opts.socket}
	conn, err := grpc.NewClient("passthrough:///agent", grpc.WithContextDialer(d.dial),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fmt.Fprintf(errOut, "sluice-agent %s: %v\n", name, err)
		return 1
	}
	defer conn.Close()
	c.cni, c.debug = sluicev1.NewCNIClient(conn), sluicev1.NewDebugClient(conn)
	c.why = func(err error) string { return describe(opts.socket, d.err(), d.hungUp(), err) }
	v, err := cmd.run(c, rest)
	var usage usageError
	if errors.As(err, &usage) {
		fmt.Fprintf(errOut, "sluice-agent %s: %v (see sluice-agent %s --help)\n", name, err, name)
		return 2
	}
	if err != nil {
		fmt.Fprintf(errOut, "sluice-agent %s: %s\n", name, c.why(err))
		return 1
	}
	if err := render(out, opts.output, v); err != nil {
		fmt.Fprintf(errOut, "sluice-agent %s: %v\n", name, err)
		return 1
	}
	if f, ok := v.(interface{ failed() bool }); ok && f.failed() {
		return 1
	}
	return 0
}

// parseCommand reads a command's flags. A wrong flag or argument count is
// one line (the caller adds where help is), not the whole usage.
func parseCommand(name string, cmd command, c *clients, args []string, getenv func(string) string, errOut io.Writer) (cliFlags, []string, error) {
	opts := cliFlags{socket: defaultSocket, output: "table"}
	fs := flag.NewFlagSet("sluice-agent "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&opts.socket, "socket", opts.socket, "the agent's socket (env SLUICE_SOCKET)")
	if v := getenv("SLUICE_SOCKET"); v != "" {
		opts.socket = v
	}
	fs.StringVar(&opts.output, "o", opts.output, "output format: table, json or yaml")
	fs.StringVar(&opts.output, "output", opts.output, "output format: table, json or yaml")
	switch name {
	case "get":
		fs.StringVar(&c.ifName, "if", "", "the attachment's interface, when the pod has several")
	case "version":
		fs.BoolVar(&c.client, "client", false, "print this binary's version only; do not ask the agent")
	}
	if err := fs.Parse(interleaved(args)); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(errOut, "usage: sluice-agent %s [--socket PATH] [-o table|json|yaml] %s\n  %s\n", name, cmd.usage, cmd.help)
			fs.SetOutput(errOut)
			fs.PrintDefaults()
		}
		return opts, nil, err
	}
	if fs.NArg() != cmd.args {
		return opts, nil, fmt.Errorf("want %d argument(s) %s, got %d", cmd.args, cmd.usage, fs.NArg())
	}
	if !slices.Contains([]string{"table", "json", "yaml"}, opts.output) {
		return opts, nil, fmt.Errorf("-o %q: want table, json or yaml", opts.output)
	}
	// A relative path is the caller's working directory's, as for any tool.
	abs, err := filepath.Abs(opts.socket)
	if err != nil {
		return opts, nil, fmt.Errorf("--socket %q: %w", opts.socket, err)
	}
	opts.socket = abs
	return opts, fs.Args(), nil
}

// usageError is an argument a command refuses before asking the agent.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

// recordingDialer dials the agent's socket and keeps the last dial error,
// and whether a connection failed under the call: gRPC reports both only
// as "Unavailable", with words that vary with the moment the agent hung up
// ("connection error", a broken pipe, EOF), and the person needs to know
// which it was.
type recordingDialer struct {
	path string
	mu   sync.Mutex
	last error
	io   error // the first read or write error on a connection
}

func (d *recordingDialer) dial(ctx context.Context, _ string) (net.Conn, error) {
	var nd net.Dialer
	conn, err := nd.DialContext(ctx, "unix", d.path)
	d.mu.Lock()
	d.last = err
	d.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return &watchedConn{Conn: conn, d: d}, nil
}

func (d *recordingDialer) hungUp() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.io
}

// watchedConn tells its dialer of the first failed read or write.
type watchedConn struct {
	net.Conn
	d *recordingDialer
}

func (c *watchedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.note(err)
	return n, err
}

func (c *watchedConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.note(err)
	return n, err
}

func (c *watchedConn) note(err error) {
	if err == nil {
		return
	}
	c.d.mu.Lock()
	if c.d.io == nil {
		c.d.io = err
	}
	c.d.mu.Unlock()
}

func (d *recordingDialer) err() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.last
}

// describe says what went wrong in words a person can act on: the socket
// could not be reached (and likely why), the agent hung up, or what the
// agent answered.
func describe(socket string, dialErr, hungUp, err error) string {
	st := status.Convert(err)
	switch {
	case dialErr != nil:
		var se *os.SyscallError
		cause := dialErr
		if errors.As(dialErr, &se) {
			cause = se.Err
		}
		hint := "is the agent running on this node? In a cluster run this in the agent's pod on the pod's node (docs/operations.md, \"Look at one node\")"
		if errors.Is(dialErr, os.ErrPermission) {
			hint = "the socket is root's: run as root, or in the agent's pod"
		}
		return fmt.Sprintf("cannot reach the agent at socket %s: %v: %s", socket, cause, hint)
	case st.Code() == codes.Unavailable && (hungUp != nil || strings.HasPrefix(st.Message(), "connection error")):
		// grpc-go's words for a connection that ended before an answer:
		// the agent's handshake refuses a uid it does not serve this way.
		return fmt.Sprintf("the agent at socket %s closed the connection (%s): it serves only the uids in its --allowed-uids (root by default)", socket, st.Message())
	case st.Code() == codes.DeadlineExceeded:
		return fmt.Sprintf("the agent at socket %s did not answer within %s", socket, callTimeout)
	}
	return fmt.Sprintf("the agent at socket %s answered %s: %s", socket, st.Code(), printable(st.Message()))
}

// interleaved moves flags before positional arguments, so
// `sluice-agent get ns/pod --socket X` works as people type it.
func interleaved(args []string) []string {
	var flags, pos []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			return append(append(flags, "--"), append(pos, args[i+1:]...)...)
		case strings.HasPrefix(a, "-"):
			flags = append(flags, a)
			if !strings.Contains(a, "=") && i+1 < len(args) && takesValue(a) {
				flags = append(flags, args[i+1])
				i++
			}
		default:
			pos = append(pos, a)
		}
	}
	return append(flags, pos...)
}

// takesValue reports whether a command flag is followed by its value.
func takesValue(flag string) bool {
	switch strings.TrimLeft(flag, "-") {
	case "h", "help", "client":
		return false
	}
	return true
}

const callTimeout = 5 * time.Second

func callContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), callTimeout)
}

func modeName(m sluicev1.Mode) string {
	return strings.ToLower(strings.TrimPrefix(m.String(), "MODE_"))
}

// short trims a 64-hex container id the way crictl does; the result is a
// prefix `get` accepts.
func short(id string) string {
	if len(id) > 13 {
		return id[:13]
	}
	return id
}

func IsCommand(args []string) bool {
	if len(args) == 0 {
		return false
	}
	_, ok := commands[args[0]]
	return ok || args[0] == "sysdump" // cli_sysdump.go: writes an archive, not a view
}

// PrintUsage writes the commands' lines of sluice-agent --help.
func PrintUsage(w io.Writer) {
	for _, name := range CommandNames() {
		cmd := commands[name]
		fmt.Fprintf(w, "       %s\n           %s\n", strings.TrimSpace("sluice-agent "+name+" [--socket PATH] [-o table|json|yaml] "+cmd.usage), cmd.help)
	}
}

// CommandNames lists the commands for --help, sorted.
func CommandNames() []string {
	var out []string
	for name := range commands {
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}
