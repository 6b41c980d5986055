package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	sluicev1 "github.com/sluicemesh/sluice/api/sluice/v1"
)

// The common on-call checks need no extra tool: `sluice-agent status` and
// `sluice-agent workloads` read the local socket and print a table.
var commands = map[string]func(sluicev1.CNIClient, sluicev1.DebugClient, io.Writer) error{
	"status":    printStatus,
	"workloads": printWorkloads,
}

func runCommand(name string, args []string, getenv func(string) string, out, errOut io.Writer) int {
	fs := flag.NewFlagSet("sluice-agent "+name, flag.ContinueOnError)
	fs.SetOutput(errOut)
	socket := fs.String("socket", "/var/run/sluice/agent.sock", "the agent's socket (env SLUICE_SOCKET)")
	if v := getenv("SLUICE_SOCKET"); v != "" {
		*socket = v
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	conn, err := grpc.NewClient("unix://"+*socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fmt.Fprintln(errOut, err)
		return 1
	}
	defer conn.Close()
	if err := commands[name](sluicev1.NewCNIClient(conn), sluicev1.NewDebugClient(conn), out); err != nil {
		fmt.Fprintf(errOut, "sluice-agent %s: agent at %s: %v\n", name, *socket, err)
		return 1
	}
	return 0
}

func callContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 5*time.Second)
}

func printStatus(cni sluicev1.CNIClient, debug sluicev1.DebugClient, out io.Writer) error {
	ctx, cancel := callContext()
	defer cancel()
	v, err := debug.Version(ctx, &sluicev1.VersionRequest{})
	if err != nil {
		return err
	}
	st, err := cni.Status(ctx, &sluicev1.StatusRequest{ApiVersion: v.ApiVersion})
	if err != nil {
		return err
	}
	ws, err := debug.ListWorkloads(ctx, &sluicev1.ListWorkloadsRequest{})
	if err != nil {
		return err
	}
	ready := "yes"
	if !st.Ready {
		ready = "no: " + st.Reason
	}
	byMode := map[string]int{}
	for _, w := range ws.Workloads {
		byMode[modeName(w.Mode)]++
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "version\t%s (api %d, serves %d–%d)\n", v.Version, v.ApiVersion, v.MinApiVersion, v.ApiVersion)
	fmt.Fprintf(tw, "ready\t%s\n", ready)
	fmt.Fprintf(tw, "workloads\t%d", len(ws.Workloads))
	for _, mode := range slices.Sorted(maps.Keys(byMode)) {
		fmt.Fprintf(tw, " (%s %d)", mode, byMode[mode])
	}
	fmt.Fprintln(tw)
	return tw.Flush()
}

func printWorkloads(_ sluicev1.CNIClient, debug sluicev1.DebugClient, out io.Writer) error {
	ctx, cancel := callContext()
	defer cancel()
	ws, err := debug.ListWorkloads(ctx, &sluicev1.ListWorkloadsRequest{})
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "POD\tCONTAINER\tIF\tMODE\tIPS\tNETNS\tAGE")
	for _, w := range ws.Workloads {
		pod := "-"
		if w.Pod.GetName() != "" {
			pod = w.Pod.GetNamespace() + "/" + w.Pod.GetName()
		}
		var ips []string
		for _, ip := range w.Ips {
			ips = append(ips, ip.Address)
		}
		age := time.Since(time.Unix(w.EnrolledUnix, 0)).Truncate(time.Second)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", pod, short(w.ContainerId), w.IfName, modeName(w.Mode),
			strings.Join(ips, ","), w.Netns, age)
	}
	return tw.Flush()
}

func modeName(m sluicev1.Mode) string {
	return strings.ToLower(strings.TrimPrefix(m.String(), "MODE_"))
}

// short trims a 64-hex container id the way crictl does.
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
