package cli

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	sluicev1 "github.com/sluicemesh/sluice/api/sluice/v1"
	"github.com/sluicemesh/sluice/internal/buildinfo"
)

type getView struct {
	workloadView
	// Drift is what the kernel holds that differs from the ruleset; empty
	// when in sync.
	Drift   []string `json:"drift"`
	Ruleset string   `json:"ruleset"`
}

// getWorkload looks one attachment up by namespace/name or by container id
// (prefix), with its ruleset and the kernel's drift.
func getWorkload(c clients, args []string) (view, error) {
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
		return nil, err
	}
	drift := resp.Drift
	if drift == nil {
		drift = []string{}
	}
	return &getView{workloadView: workloadViewOf(resp.Workload), Drift: drift, Ruleset: resp.Ruleset}, nil
}

func (g *getView) table(out io.Writer) error {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	if g.UID != "" {
		fmt.Fprintf(tw, "pod\t%s (uid %s)\n", g.podName(), printable(g.UID))
	} else {
		fmt.Fprintf(tw, "pod\t%s\n", g.podName())
	}
	fmt.Fprintf(tw, "container\t%s\n", printable(g.ContainerID))
	fmt.Fprintf(tw, "interface\t%s\n", printable(g.Interface))
	fmt.Fprintf(tw, "mode\t%s\n", g.Mode)
	fmt.Fprintf(tw, "ips\t%s\n", g.ipList())
	fmt.Fprintf(tw, "netns\t%s\n", printable(g.Netns))
	fmt.Fprintf(tw, "enrolled\t%s ago\n", g.age())
	fmt.Fprintf(tw, "ruleset hash\t%s\n", printable(g.RulesetHash))
	if len(g.Drift) == 0 {
		fmt.Fprintf(tw, "kernel\tin sync with the ruleset below\n")
	} else {
		fmt.Fprintf(tw, "kernel\tDRIFTED (reasserted on the next resync):\n")
		for _, d := range g.Drift {
			fmt.Fprintf(tw, "\t  %s\n", printable(d))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(out, "\n%s", printableText(g.Ruleset))
	return err
}

type explainView struct {
	Capture bool     `json:"capture"`
	Mode    string   `json:"mode,omitempty"`
	Reason  string   `json:"reason"`
	Inputs  []string `json:"inputs"`
	Ruleset string   `json:"ruleset,omitempty"`
}

// getExplain asks the policy about a pod, enrolled or not.
func getExplain(c clients, args []string) (view, error) {
	ns, name, ok := strings.Cut(args[0], "/")
	if !ok || ns == "" || name == "" {
		return nil, usageError{fmt.Sprintf("explain %q: want NAMESPACE/NAME", args[0])}
	}
	ctx, cancel := callContext()
	defer cancel()
	resp, err := c.debug.Explain(ctx, &sluicev1.ExplainRequest{Pod: &sluicev1.PodRef{Namespace: ns, Name: name}})
	if err != nil {
		return nil, err
	}
	v := &explainView{Capture: resp.Capture, Reason: resp.Reason, Inputs: resp.Inputs, Ruleset: resp.Ruleset}
	if v.Inputs == nil {
		v.Inputs = []string{}
	}
	if resp.Capture {
		v.Mode = modeName(resp.Mode)
	}
	return v, nil
}

func (e *explainView) table(out io.Writer) error {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	if e.Capture {
		fmt.Fprintf(tw, "capture\tyes, %s mode\n", e.Mode)
	} else {
		fmt.Fprintf(tw, "capture\tno: passed through\n")
	}
	fmt.Fprintf(tw, "reason\t%s\n", printable(e.Reason))
	for i, in := range e.Inputs {
		label := ""
		if i == 0 {
			label = "inputs"
		}
		fmt.Fprintf(tw, "%s\t%s\n", label, printable(in))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if e.Ruleset != "" {
		_, err := fmt.Fprintf(out, "\nan ADD would program:\n%s", printableText(e.Ruleset))
		return err
	}
	return nil
}

type versionView struct {
	Client string `json:"client"`
	// Agent is the running agent's version; AgentError says why there is
	// none (not asked with --client, or not reachable).
	Agent      *agentVersion `json:"agent,omitempty"`
	AgentError string        `json:"agentError,omitempty"`
}

type agentVersion struct {
	Version       string `json:"version"`
	APIVersion    int32  `json:"apiVersion"`
	MinAPIVersion int32  `json:"minApiVersion"`
}

// getVersion succeeds without an agent, as `kubectl version --client`:
// the binary's own version is worth knowing when the agent will not start.
func getVersion(c clients, _ []string) (view, error) {
	v := &versionView{Client: buildinfo.Version}
	if c.client {
		return v, nil
	}
	ctx, cancel := callContext()
	defer cancel()
	resp, err := c.debug.Version(ctx, &sluicev1.VersionRequest{})
	if err != nil {
		v.AgentError = c.why(err)
		return v, nil
	}
	v.Agent = &agentVersion{Version: resp.Version, APIVersion: int32(resp.ApiVersion), MinAPIVersion: int32(resp.MinApiVersion)}
	return v, nil
}

func (v *versionView) table(out io.Writer) error {
	fmt.Fprintf(out, "sluice-agent (this binary)  %s\n", v.Client)
	switch {
	case v.Agent != nil:
		fmt.Fprintf(out, "sluice-agent (running)      %s (api %d, serves %d–%d)\n", printable(v.Agent.Version),
			v.Agent.APIVersion, v.Agent.MinAPIVersion, v.Agent.APIVersion)
	case v.AgentError != "":
		fmt.Fprintf(out, "sluice-agent (running)      not reachable: %s\n", printable(v.AgentError))
	}
	return nil
}
