package main

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/sluicemesh/sluice/internal/cniwire"
	"github.com/sluicemesh/sluice/internal/pluginconf"
)

// call is what every verb starts with: the parsed config and CNI_ARGS, a
// logger, a request id and a deadline.
type call struct {
	conf *NetConf
	pod  podArgs
	log  *slog.Logger
	id   string
}

func newCall(args *skel.CmdArgs, verb string) (*call, error) {
	// Only ADD and CHECK send the previous result's IPs; DEL gets libcni's
	// cached result, which it never reads (and must never fail on).
	conf, err := parseConfig(args.StdinData, verb == "ADD" || verb == "CHECK")
	if err != nil {
		return nil, types.NewError(types.ErrInvalidNetworkConfig, err.Error(), "")
	}
	pod, err := parseArgs(args.Args)
	if err != nil {
		return nil, types.NewError(types.ErrInvalidEnvironmentVariables, err.Error(), "")
	}
	id := newRequestID()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: conf.parsed.LogLevel})).With(
		"verb", verb, "request_id", id, "container_id", args.ContainerID,
		"pod", pod.Namespace+"/"+pod.Name)
	conf.warnings = append(conf.warnings, verbWarnings(verb, conf)...)
	for _, w := range conf.warnings {
		log.Warn(w)
	}
	return &call{conf: conf, pod: pod, log: log, id: id}, nil
}

// modeName is a mode as the agent and its CLI print it: sidecar, ambient.
func modeName(m cniwire.Mode) string {
	return strings.ToLower(strings.TrimPrefix(m.String(), "MODE_"))
}

// verbWarnings are what is worth saying only for some verbs. A prevResult
// with no IPs matters to ADD and CHECK (the agent picks IP families from
// them); on DEL, libcni passes the plugin's own cached result, which is
// empty when sluice runs as a network of its own (Multus).
func verbWarnings(verb string, conf *NetConf) []string {
	if verb != "ADD" && verb != "CHECK" {
		return nil
	}
	if r, ok := conf.PrevResult.(*current.Result); ok && len(r.IPs) == 0 {
		return []string{"prevResult has no IPs: the primary CNI assigned none"}
	}
	return nil
}

func (c *call) context() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), c.conf.parsed.Timeout)
}

func (c *call) pluginConfig() *cniwire.PluginConfig {
	return &cniwire.PluginConfig{CniVersion: c.conf.CNIVersion, NetworkName: c.conf.Name, Raw: c.conf.raw}
}

func (c *call) podRef() *cniwire.PodRef {
	return &cniwire.PodRef{Namespace: c.pod.Namespace, Name: c.pod.Name, Uid: c.pod.UID}
}

// prevResult is what the plugin passes through. Run as a network of its own
// (Multus, Istio's chained: false) there is none: the result is empty, as
// istio-cni's, and the agent gets no IPs from it.
func (c *call) prevResult() *current.Result {
	if r, ok := c.conf.PrevResult.(*current.Result); ok {
		return r
	}
	return &current.Result{CNIVersion: current.ImplementedSpecVersion}
}

func cmdAdd(args *skel.CmdArgs) error {
	c, err := newCall(args, "ADD")
	if err != nil {
		return err
	}
	prev := c.prevResult()
	// Encoded before the call and written only after it succeeds: the
	// encoding (reflection on first use) runs while the exec is warm, not
	// after the wait for the agent, when another process has had the core
	// (docs/history/performance.md, The plugin's exec).
	result, err := encodeResult(prev, c.conf.CNIVersion)
	if err != nil {
		return err
	}
	if c.conf.excluded(c.pod.Namespace) {
		c.log.Info("namespace excluded in plugin config; not asking the agent")
		return writeResult(result)
	}
	a := newAgent(c.conf.parsed.Socket)
	ctx, cancel := c.context()
	defer cancel()
	var resp cniwire.AddResponse
	err = a.callWaiting(ctx, cniwire.CNI_Add_FullMethodName, &cniwire.AddRequest{
		ApiVersion:  apiVersion,
		ContainerId: args.ContainerID,
		Netns:       args.Netns,
		IfName:      args.IfName,
		Pod:         c.podRef(),
		Ips:         ipConfigs(prev),
		Config:      c.pluginConfig(),
		RequestId:   c.id,
		Warnings:    c.conf.warnings,
	}, &resp)
	if err != nil {
		c.log.Error("agent refused or unreachable", "err", err)
		return a.callError(ctx, "ADD", err)
	}
	c.log.Info("done", "enrolled", resp.Enrolled, "mode", modeName(resp.Mode), "reason", resp.Reason)
	return writeResult(result)
}

// encodeResult is types.PrintResult's output, not yet written.
func encodeResult(r types.Result, version string) ([]byte, error) {
	v, err := r.GetAsVersion(version)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if err := v.PrintTo(&buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func writeResult(b []byte) error {
	_, err := os.Stdout.Write(b)
	return err
}

// cmdDel never fails because the agent is down or the netns is gone: a
// failing DEL would wedge pod teardown. The agent catches up from its
// journal and GC.
func cmdDel(args *skel.CmdArgs) error {
	c, err := newCall(args, "DEL")
	if err != nil {
		return err
	}
	if c.conf.excluded(c.pod.Namespace) {
		return nil
	}
	a := newAgent(c.conf.parsed.Socket)
	ctx, cancel := c.context()
	defer cancel()
	err = a.call(ctx, cniwire.CNI_Del_FullMethodName, &cniwire.DelRequest{
		ApiVersion:  apiVersion,
		ContainerId: args.ContainerID,
		Netns:       args.Netns,
		IfName:      args.IfName,
		Pod:         c.podRef(),
		Config:      c.pluginConfig(),
		RequestId:   c.id,
		Warnings:    c.conf.warnings,
	}, &cniwire.DelResponse{})
	if err != nil {
		c.log.Warn("agent DEL failed; left to the agent's GC", "err", err)
	}
	return nil
}

func cmdCheck(args *skel.CmdArgs) error {
	c, err := newCall(args, "CHECK")
	if err != nil {
		return err
	}
	if c.conf.excluded(c.pod.Namespace) {
		return nil
	}
	a := newAgent(c.conf.parsed.Socket)
	ctx, cancel := c.context()
	defer cancel()
	var resp cniwire.CheckResponse
	err = a.callWaiting(ctx, cniwire.CNI_Check_FullMethodName, &cniwire.CheckRequest{
		ApiVersion:  apiVersion,
		ContainerId: args.ContainerID,
		Netns:       args.Netns,
		IfName:      args.IfName,
		Pod:         c.podRef(),
		Ips:         ipConfigs(c.prevResult()),
		Config:      c.pluginConfig(),
		RequestId:   c.id,
		Warnings:    c.conf.warnings,
	}, &resp)
	if err != nil {
		return a.callError(ctx, "CHECK", err)
	}
	if len(resp.Drift) > 0 {
		return types.NewError(types.ErrInternal, "sluice CHECK: capture rules drifted: "+strings.Join(resp.Drift, "; "), "")
	}
	return nil
}

// cmdStatus answers the runtime's "can you take pods?". By default the
// answer is yes once the entry parses: the agent being away is not the
// node's network being down (ADD fails closed on its own, and excluded
// namespaces need no agent), and a failing STATUS makes the kubelet stop
// every pod's sync and, with another node Ready, drains the node. With
// "status": "agent" it asks the agent too and answers the spec's 50 when
// the agent cannot take pods (docs/operations.md measures both).
func cmdStatus(args *skel.CmdArgs) error {
	c, err := newCall(args, "STATUS")
	if err != nil {
		return err
	}
	if c.conf.parsed.Status != pluginconf.StatusAgent {
		return nil
	}
	a := newAgent(c.conf.parsed.Socket)
	ctx, cancel := c.context()
	defer cancel()
	var resp cniwire.StatusResponse
	err = a.call(ctx, cniwire.CNI_Status_FullMethodName, &cniwire.StatusRequest{ApiVersion: apiVersion, Config: c.pluginConfig(), RequestId: c.id}, &resp)
	if err != nil {
		if !reachable(err) {
			return types.NewError(types.ErrPluginNotAvailable, a.callError(ctx, "STATUS", err).Msg, "")
		}
		return a.callError(ctx, "STATUS", err)
	}
	if !resp.Ready {
		return types.NewError(types.ErrPluginNotAvailable, fmt.Sprintf("sluice-agent at %s is not ready: %s", a.socket, resp.Reason), "")
	}
	return nil
}

func cmdGC(args *skel.CmdArgs) error {
	c, err := newCall(args, "GC")
	if err != nil {
		return err
	}
	if c.conf.ValidAttachments == nil {
		// An absent key would make every attachment of the network look stale.
		return types.NewError(types.ErrInvalidNetworkConfig, "sluice GC: no cni.dev/valid-attachments in the config; nothing removed", "")
	}
	valid := make([]*cniwire.Attachment, 0, len(c.conf.ValidAttachments))
	for _, v := range c.conf.ValidAttachments {
		valid = append(valid, &cniwire.Attachment{ContainerId: v.ContainerID, IfName: v.IfName})
	}
	a := newAgent(c.conf.parsed.Socket)
	ctx, cancel := c.context()
	defer cancel()
	var resp cniwire.GCResponse
	err = a.callWaiting(ctx, cniwire.CNI_GC_FullMethodName, &cniwire.GCRequest{ApiVersion: apiVersion, ValidAttachments: valid,
		ValidAttachmentsPresent: true, Config: c.pluginConfig(), RequestId: c.id}, &resp)
	if err != nil {
		return a.callError(ctx, "GC", err)
	}
	c.log.Info("done", "removed", len(resp.Removed))
	return nil
}

func ipConfigs(r *current.Result) []*cniwire.IPConfig {
	out := make([]*cniwire.IPConfig, 0, len(r.IPs))
	for _, ip := range r.IPs {
		cfg := &cniwire.IPConfig{Address: ip.Address.String()}
		if ip.Gateway != nil {
			cfg.Gateway = ip.Gateway.String()
		}
		if ip.Interface != nil && *ip.Interface >= 0 && *ip.Interface < len(r.Interfaces) {
			cfg.Interface = r.Interfaces[*ip.Interface].Name
		}
		out = append(out, cfg)
	}
	return out
}
