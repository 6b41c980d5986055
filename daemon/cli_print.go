package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	sluicev1 "github.com/sluicemesh/sluice/api/sluice/v1"
)

func printStatus(c clients, _ []string, out io.Writer) error {
	ctx, cancel := callContext()
	defer cancel()
	v, err := c.debug.Version(ctx, &sluicev1.VersionRequest{})
	if err != nil {
		return err
	}
	st, err := c.cni.Status(ctx, &sluicev1.StatusRequest{ApiVersion: v.ApiVersion})
	if err != nil {
		return err
	}
	ws, err := c.debug.ListWorkloads(ctx, &sluicev1.ListWorkloadsRequest{})
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
	modes := make([]string, 0, len(byMode))
	for mode := range byMode {
		modes = append(modes, mode)
	}
	slices.Sort(modes)
	for _, mode := range modes {
		fmt.Fprintf(tw, " (%s %d)", mode, byMode[mode])
	}
	fmt.Fprintln(tw)
	if err := tw.Flush(); err != nil {
		return err
	}
	if !st.Ready {
		return errNotReady
	}
	return nil
}

func printWorkloads(c clients, _ []string, out io.Writer) error {
	ctx, cancel := callContext()
	defer cancel()
	ws, err := c.debug.ListWorkloads(ctx, &sluicev1.ListWorkloadsRequest{})
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "POD\tCONTAINER\tIF\tMODE\tIPS\tNETNS\tAGE")
	for _, w := range ws.Workloads {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", podName(w.Pod), short(w.ContainerId), w.IfName, modeName(w.Mode),
			ipList(w.Ips), w.Netns, age(w.EnrolledUnix))
	}
	return tw.Flush()
}

// printGet looks one attachment up by namespace/name or by container id
// (prefix), and prints it with its ruleset and the kernel's drift.
func printGet(c clients, args []string, out io.Writer) error {
	ctx, cancel := callContext()
	defer cancel()
	req := &sluicev1.GetWorkloadRequest{IfName: c.ifName}
	if ns, name, ok := strings.Cut(args[0], "/"); ok {
		req.Pod = &sluicev1.PodRef{Namespace: ns, Name: name}
	} else {
		req.ContainerId = args[0]
	}
	resp, err := c.debug.GetWorkload(ctx, req)
	if err != nil {
		return err
	}
	w := resp.Workload
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	if uid := w.Pod.GetUid(); uid != "" {
		fmt.Fprintf(tw, "pod\t%s (uid %s)\n", podName(w.Pod), uid)
	} else {
		fmt.Fprintf(tw, "pod\t%s\n", podName(w.Pod))
	}
	fmt.Fprintf(tw, "container\t%s\n", w.ContainerId)
	fmt.Fprintf(tw, "interface\t%s\n", w.IfName)
	fmt.Fprintf(tw, "mode\t%s\n", modeName(w.Mode))
	fmt.Fprintf(tw, "ips\t%s\n", ipList(w.Ips))
	fmt.Fprintf(tw, "netns\t%s\n", w.Netns)
	fmt.Fprintf(tw, "enrolled\t%s ago\n", age(w.EnrolledUnix))
	fmt.Fprintf(tw, "ruleset hash\t%s\n", w.RulesetHash)
	if len(resp.Drift) == 0 {
		fmt.Fprintf(tw, "kernel\tin sync with the ruleset below\n")
	} else {
		fmt.Fprintf(tw, "kernel\tDRIFTED (reasserted on the next resync):\n")
		for _, d := range resp.Drift {
			fmt.Fprintf(tw, "\t  %s\n", d)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(out, "\n%s", resp.Ruleset)
	return nil
}

// printExplain asks the policy about a pod, enrolled or not.
func printExplain(c clients, args []string, out io.Writer) error {
	ns, name, ok := strings.Cut(args[0], "/")
	if !ok || ns == "" || name == "" {
		return fmt.Errorf("explain %q: want NAMESPACE/NAME", args[0])
	}
	ctx, cancel := callContext()
	defer cancel()
	resp, err := c.debug.Explain(ctx, &sluicev1.ExplainRequest{Pod: &sluicev1.PodRef{Namespace: ns, Name: name}})
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	if resp.Capture {
		fmt.Fprintf(tw, "capture\tyes, %s mode\n", modeName(resp.Mode))
	} else {
		fmt.Fprintf(tw, "capture\tno: passed through\n")
	}
	fmt.Fprintf(tw, "reason\t%s\n", resp.Reason)
	for i, in := range resp.Inputs {
		label := ""
		if i == 0 {
			label = "inputs"
		}
		fmt.Fprintf(tw, "%s\t%s\n", label, in)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if resp.Ruleset != "" {
		fmt.Fprintf(out, "\nan ADD would program:\n%s", resp.Ruleset)
	}
	return nil
}

func podName(p *sluicev1.PodRef) string {
	if p.GetName() == "" {
		return "-"
	}
	return p.GetNamespace() + "/" + p.GetName()
}

func ipList(ips []*sluicev1.IPConfig) string {
	var out []string
	for _, ip := range ips {
		out = append(out, ip.Address)
	}
	if len(out) == 0 {
		return "-"
	}
	return strings.Join(out, ",")
}

func age(unix int64) time.Duration {
	return time.Since(time.Unix(unix, 0)).Truncate(time.Second)
}
