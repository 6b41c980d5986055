package cli

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sluicev1 "github.com/sluicemesh/sluice/api/sluice/v1"
)

// Each command asks the agent, builds its view and prints the view as a
// table; every string that came from the agent goes through printable.

type statusView struct {
	Version       string         `json:"version"`
	APIVersion    int32          `json:"apiVersion"`
	MinAPIVersion int32          `json:"minApiVersion"`
	Ready         bool           `json:"ready"`
	Reason        string         `json:"reason,omitempty"`
	Ztunnel       *ztunnelView   `json:"ztunnel,omitempty"` // nil: an agent without Debug.Ztunnel
	Workloads     int            `json:"workloads"`
	ByMode        map[string]int `json:"byMode"`
}

type ztunnelView struct {
	Ambient     bool   `json:"ambient"`
	Socket      string `json:"socket,omitempty"`
	Connections int32  `json:"connections"`
	Ready       bool   `json:"ready"`
	Reason      string `json:"reason,omitempty"`
}

func getStatus(c clients, _ []string) (view, error) {
	ctx, cancel := callContext()
	defer cancel()
	v, err := c.debug.Version(ctx, &sluicev1.VersionRequest{})
	if err != nil {
		return nil, err
	}
	st, err := c.cni.Status(ctx, &sluicev1.StatusRequest{ApiVersion: v.ApiVersion})
	if err != nil {
		return nil, err
	}
	ws, err := c.debug.ListWorkloads(ctx, &sluicev1.ListWorkloadsRequest{})
	if err != nil {
		return nil, err
	}
	s := &statusView{Version: v.Version, APIVersion: int32(v.ApiVersion), MinAPIVersion: int32(v.MinApiVersion),
		Ready: st.Ready, Reason: st.Reason, Workloads: len(ws.Workloads), ByMode: map[string]int{}}
	for _, w := range ws.Workloads {
		s.ByMode[modeName(w.Mode)]++
	}
	z, err := c.debug.Ztunnel(ctx, &sluicev1.ZtunnelRequest{})
	switch {
	case err == nil:
		s.Ztunnel = &ztunnelView{Ambient: z.Ambient, Socket: z.Socket, Connections: z.Connections, Ready: z.Ready, Reason: z.Reason}
	case status.Code(err) != codes.Unimplemented:
		return nil, err
	}
	return s, nil
}

// failed makes status exit 1 after printing: scripts and exec probes read it.
func (s *statusView) failed() bool { return !s.Ready }

func (s *statusView) table(out io.Writer) error {
	ready := "yes"
	if !s.Ready {
		ready = "no: " + printable(s.Reason)
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "version\t%s (api %d, serves %d–%d)\n", printable(s.Version), s.APIVersion, s.MinAPIVersion, s.APIVersion)
	fmt.Fprintf(tw, "ready\t%s\n", ready)
	fmt.Fprintf(tw, "ztunnel\t%s\n", s.Ztunnel.line())
	fmt.Fprintf(tw, "workloads\t%d", s.Workloads)
	modes := make([]string, 0, len(s.ByMode))
	for mode := range s.ByMode {
		modes = append(modes, mode)
	}
	slices.Sort(modes)
	for _, mode := range modes {
		fmt.Fprintf(tw, " (%s %d)", mode, s.ByMode[mode])
	}
	fmt.Fprintln(tw)
	return tw.Flush()
}

// line is the ztunnel link in one line: ambient pods start only when it
// says connected, whatever "ready" says of the agent.
func (z *ztunnelView) line() string {
	switch {
	case z == nil:
		return "unknown: the agent is older than this client"
	case !z.Ambient:
		return "off (the agent runs without --ambient)"
	case z.Ready:
		return fmt.Sprintf("connected (%d) on %s", z.Connections, printable(z.Socket))
	}
	return fmt.Sprintf("NOT CONNECTED: %s; ambient pods wait until ztunnel connects", printable(z.Reason))
}

type workloadView struct {
	Namespace   string   `json:"namespace,omitempty"`
	Pod         string   `json:"pod,omitempty"`
	UID         string   `json:"uid,omitempty"`
	ContainerID string   `json:"containerID"`
	Interface   string   `json:"interface"`
	Mode        string   `json:"mode"`
	IPs         []string `json:"ips"`
	Netns       string   `json:"netns"`
	Enrolled    string   `json:"enrolled"` // RFC 3339
	RulesetHash string   `json:"rulesetHash"`
	enrolled    time.Time
}

func workloadViewOf(w *sluicev1.Workload) workloadView {
	v := workloadView{Namespace: w.Pod.GetNamespace(), Pod: w.Pod.GetName(), UID: w.Pod.GetUid(), ContainerID: w.ContainerId,
		Interface: w.IfName, Mode: modeName(w.Mode), IPs: []string{}, Netns: w.Netns, RulesetHash: w.RulesetHash,
		enrolled: time.Unix(w.EnrolledUnix, 0).UTC()}
	v.Enrolled = v.enrolled.Format(time.RFC3339)
	for _, ip := range w.Ips {
		v.IPs = append(v.IPs, ip.Address)
	}
	return v
}

func (w workloadView) podName() string {
	if w.Pod == "" {
		return "-"
	}
	return printable(w.Namespace + "/" + w.Pod)
}

func (w workloadView) ipList() string {
	if len(w.IPs) == 0 {
		return "-"
	}
	return printable(strings.Join(w.IPs, ","))
}

func (w workloadView) age() time.Duration { return time.Since(w.enrolled).Truncate(time.Second) }

type workloadsView struct {
	Workloads []workloadView `json:"workloads"`
}

func getWorkloads(c clients, _ []string) (view, error) {
	ctx, cancel := callContext()
	defer cancel()
	ws, err := c.debug.ListWorkloads(ctx, &sluicev1.ListWorkloadsRequest{})
	if err != nil {
		return nil, err
	}
	v := &workloadsView{Workloads: []workloadView{}}
	for _, w := range ws.Workloads {
		v.Workloads = append(v.Workloads, workloadViewOf(w))
	}
	return v, nil
}

func (v *workloadsView) table(out io.Writer) error {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "POD\tCONTAINER\tIF\tMODE\tIPS\tNETNS\tAGE")
	for _, w := range v.Workloads {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", w.podName(), printable(short(w.ContainerID)), printable(w.Interface),
			w.Mode, w.ipList(), printable(w.Netns), w.age())
	}
	return tw.Flush()
}
