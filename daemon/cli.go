package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	sluicev1 "github.com/sluicemesh/sluice/api/sluice/v1"
	"github.com/sluicemesh/sluice/internal/buildinfo"
)

// The common on-call checks need no extra tool: each command reads the
// local socket and prints what an operator asks first.
type command struct {
	usage string // arguments, for --help
	help  string
	args  int // positional arguments it takes
	run   func(c clients, args []string, out io.Writer) error
}

// clients are the agent's services over one connection.
type clients struct {
	cni    sluicev1.CNIClient
	debug  sluicev1.DebugClient
	ifName string // --if, for get
}

var commands = map[string]command{
	"status":    {"", "readiness, version and workload counts; exits 1 when the agent is not ready", 0, printStatus},
	"workloads": {"", "the enrolled attachments; the POD or CONTAINER column is what get accepts", 0, printWorkloads},
	"get":       {"POD|CONTAINER", "one enrolled attachment: its ruleset as nft text and whether the kernel drifted (POD is namespace/name; CONTAINER an id or a prefix)", 1, printGet},
	"explain":   {"NAMESPACE/NAME", "what an ADD would do for the pod and why, touching nothing", 1, printExplain},
	"version":   {"", "this binary's version and the running agent's", 0, printVersion},
}

// errNotReady makes status exit 1 after printing the table.
var errNotReady = errors.New("not ready")

func runCommand(name string, args []string, getenv func(string) string, out, errOut io.Writer) int {
	cmd := commands[name]
	fs := flag.NewFlagSet("sluice-agent "+name, flag.ContinueOnError)
	fs.SetOutput(errOut)
	fs.Usage = func() {
		fmt.Fprintf(errOut, "usage: sluice-agent %s [--socket PATH] %s\n  %s\n", name, cmd.usage, cmd.help)
		fs.PrintDefaults()
	}
	socket := fs.String("socket", "/var/run/sluice/agent.sock", "the agent's socket (env SLUICE_SOCKET)")
	if v := getenv("SLUICE_SOCKET"); v != "" {
		*socket = v
	}
	c := clients{}
	if name == "get" {
		fs.StringVar(&c.ifName, "if", "", "the attachment's interface, when the pod has several")
	}
	if err := fs.Parse(interleaved(args)); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() != cmd.args {
		fs.Usage()
		return 2
	}
	conn, err := grpc.NewClient("unix://"+*socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fmt.Fprintln(errOut, err)
		return 1
	}
	defer conn.Close()
	c.cni, c.debug = sluicev1.NewCNIClient(conn), sluicev1.NewDebugClient(conn)
	err = cmd.run(c, fs.Args(), out)
	switch {
	case errors.Is(err, errNotReady):
		return 1
	case err != nil:
		fmt.Fprintf(errOut, "sluice-agent %s: agent at %s: %v\n", name, *socket, err)
		return 1
	}
	return 0
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
			if !strings.Contains(a, "=") && i+1 < len(args) && a != "-h" && a != "--help" {
				flags = append(flags, args[i+1])
				i++
			}
		default:
			pos = append(pos, a)
		}
	}
	return append(flags, pos...)
}

func callContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 5*time.Second)
}

func printVersion(c clients, _ []string, out io.Writer) error {
	fmt.Fprintf(out, "sluice-agent (this binary)  %s\n", buildinfo.Version)
	ctx, cancel := callContext()
	defer cancel()
	v, err := c.debug.Version(ctx, &sluicev1.VersionRequest{})
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "sluice-agent (running)      %s (api %d, serves %d–%d)\n", v.Version, v.ApiVersion, v.MinApiVersion, v.ApiVersion)
	return nil
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

func isCommand(args []string) bool {
	if len(args) == 0 {
		return false
	}
	_, ok := commands[args[0]]
	return ok
}

// commandNames lists the commands for --help, sorted.
func commandNames() []string {
	var out []string
	for name := range commands {
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}
