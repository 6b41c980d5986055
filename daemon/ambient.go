package main

import (
	"context"

	"k8s.io/client-go/kubernetes"

	"github.com/sluicemesh/sluice/daemon/ambientmesh"
	"github.com/sluicemesh/sluice/daemon/metrics"
	"github.com/sluicemesh/sluice/daemon/workloads"
)

// buildAmbient builds the ambient node (ambientmesh.Node: the host netns,
// the host probe table and its probe owner, the ZDS server) before the
// store it feeds, which reads it back only once the journal is loaded.
func (a *agent) buildAmbient() (err error) {
	if !a.cfg.ambient {
		return nil
	}
	cfg := ambientmesh.NodeConfig{HostNetns: a.cfg.hostNetns, HostProc: a.cfg.hostProc, Host: a.cfg.hostConfig(),
		FollowKubelet: a.cfg.probeSNATUID.auto(), Recheck: a.cfg.resync, ZtunnelSocket: a.cfg.ztunnelSocket,
		ConnectWait: a.cfg.ztunnelWait, Open: a.opener.Open, Store: func() *workloads.Store { return a.store }, Log: a.log}
	if a.k != nil {
		cfg.Pods = a.k.informers.Pods
	}
	if a.amb, err = ambientmesh.NewNode(cfg); err != nil {
		return err
	}
	// After the node's Stop, or alone when a later step fails.
	a.closers = append(a.closers, a.amb.Close)
	// A replaced ZDS socket strands every ztunnel that restarts (a removed
	// one is listened on again).
	a.checks.AddLiveness("ztunnel-socket", a.amb.ZDS().SocketOurs)
	return nil
}

// addAmbient builds the agent's one ambient owner (ambientmesh.Mesh, with
// the redirection annotator when there is Kubernetes), which the CNI
// service, live enrolment and adoption share, and adds the ambient node as
// a part, once the store it feeds exists.
func (a *agent) addAmbient() error {
	var client kubernetes.Interface
	if a.k != nil {
		client = a.k.client
	}
	a.mesh = ambientmesh.New(a.store, client, a.log.With("component", "redirection"))
	if a.amb != nil {
		a.parts = append(a.parts, ambientPart{node: a.amb})
	}
	return nil
}

// ambientPart runs the ambient node; its stop, after the drain, keeps the
// node's order (ambientmesh.Node.Stop): the probe owner, the ZDS server,
// and on an uninstall the host table out.
type ambientPart struct {
	basePart
	node *ambientmesh.Node
}

func (p ambientPart) start(ctx context.Context, fail func(error)) error {
	p.node.Start(ctx, fail)
	return nil
}

func (p ambientPart) metrics(m *metrics.Metrics) { p.node.Metrics(m) }

func (p ambientPart) leavesState() bool { return true }

func (p ambientPart) stop(leaving, drained bool) {
	if drained {
		p.node.Stop(leaving)
	}
}
