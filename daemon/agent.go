package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	grpchealth "google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/sluicemesh/sluice/daemon/events"
	"github.com/sluicemesh/sluice/daemon/health"
	"github.com/sluicemesh/sluice/daemon/kubecache"
	"github.com/sluicemesh/sluice/daemon/metrics"
	"github.com/sluicemesh/sluice/daemon/nodetaint"
	"github.com/sluicemesh/sluice/daemon/podcheck"
	"github.com/sluicemesh/sluice/daemon/podns"
	"github.com/sluicemesh/sluice/daemon/policy"
	"github.com/sluicemesh/sluice/daemon/rpc"
	"github.com/sluicemesh/sluice/daemon/workloads"
	"github.com/sluicemesh/sluice/daemon/ztunnel"
	"github.com/sluicemesh/sluice/installer"
	"github.com/sluicemesh/sluice/internal/buildinfo"
	"github.com/sluicemesh/sluice/internal/dirlock"
)

// agent is the running sluice-agent: newAgent builds its parts in
// dependency order, run starts and serves them, shutdown stops them in the
// one order that keeps pods safe.
type agent struct {
	cfg *config
	log *slog.Logger
	// left is set by shutdown when the agent is leaving the node.
	left bool
	// ctx is the background components' (informers, ZDS, installer,
	// resync), cancelled only after the drain: an in-flight ADD may still
	// need them (an ambient ADD waits for ztunnel's ack).
	ctx            context.Context
	stopBackground context.CancelFunc
	closers        []func() // undone in reverse by close
	errc           chan error

	rc        *rest.Config     // nil: standalone
	informers *kubecache.Cache // nil: standalone
	kube      *policy.Kube     // nil: standalone
	pol       rpc.Policy
	opener    *podns.Opener
	metrics   *metrics.Metrics
	client    kubernetes.Interface
	rec       *events.Recorder // nil records nothing (standalone)
	decisions *events.Decisions
	amb       *ambientNode // nil without --ambient
	zdsDone   chan struct{}
	store     *workloads.Store
	inst      *installer.Installer // nil without an installer
	checks    *health.Checks
	rep       *podcheck.Checker // nil standalone
	auth      *rpc.Authorizer

	gs   *grpc.Server
	hs   *grpchealth.Server
	hsrv *http.Server
}

// newAgent builds every part; nothing serves or runs in the background yet.
func newAgent(cfg *config, log *slog.Logger) (*agent, error) {
	a := &agent{cfg: cfg, log: log, errc: make(chan error, 4), metrics: metrics.New(), checks: &health.Checks{},
		zdsDone: make(chan struct{}), decisions: events.NewDecisions(log.With("component", "cni"))}
	a.ctx, a.stopBackground = context.WithCancel(context.Background())
	a.closers = append(a.closers, a.stopBackground)
	log.Info("starting", "version", buildinfo.Version, "socket", cfg.socket, "state_dir", cfg.stateDir)
	for _, build := range []func() error{a.buildPolicy, a.lockState, a.buildEvents, a.buildAmbient, a.buildStore, a.buildInstaller} {
		if err := build(); err != nil {
			a.close()
			return nil, err
		}
	}
	return a, nil
}

func (a *agent) buildPolicy() (err error) {
	if a.cfg.kubeconfig == "" {
		a.pol, err = staticPolicy(a.cfg)
		return err
	}
	if a.rc, err = restConfig(a.cfg.kubeconfig); err != nil {
		return err
	}
	client, informers, err := newInformers(a.cfg, a.rc, a.log)
	if err != nil {
		return err
	}
	a.informers = informers
	if a.kube, err = newKubePolicy(a.cfg, client, informers, a.log); err != nil {
		return err
	}
	a.pol = a.kube
	return nil
}

// lockState runs before the journal is read: a second agent on this state
// dir would re-apply what the first released.
func (a *agent) lockState() error {
	opener, err := podns.NewOpener(splitList(a.cfg.netnsRoots), a.cfg.hostProc)
	if err != nil {
		return err
	}
	a.opener = opener
	lock, err := dirlock.Acquire(a.cfg.stateDir, 0o700)
	if err != nil {
		return err
	}
	a.closers = append(a.closers, func() { lock.Release() })
	return nil
}

func (a *agent) buildEvents() (err error) {
	if a.kube == nil {
		return nil
	}
	if a.client, a.rec, err = newEvents(a.cfg, a.rc, a.log); err != nil {
		return err
	}
	a.closers = append(a.closers, func() { flushEvents(a.rec) })
	return nil
}

func (a *agent) buildAmbient() (err error) {
	if !a.cfg.ambient {
		close(a.zdsDone)
		return nil
	}
	// ZDS reads the store only once it serves, after buildStore.
	snapshot := func() []ztunnel.Workload { return a.store.ZtunnelSnapshot() }
	records := func() []workloads.Record { return a.store.List() }
	if a.amb, err = newAmbient(a.cfg, a.opener, snapshot, records, a.informers, a.log); err != nil {
		return err
	}
	// A removed or replaced ZDS socket strands every ztunnel that restarts.
	a.checks.AddLiveness("ztunnel-socket", a.amb.zds.SocketOurs)
	return nil
}

func (a *agent) buildStore() (err error) {
	a.store, err = openStore(a.cfg, a.opener, a.amb, a.metrics, a.rec, a.log)
	return err
}

func (a *agent) buildInstaller() (err error) {
	if !a.cfg.installs() {
		return nil
	}
	if a.inst, err = newInstaller(a.cfg, a.log); err != nil {
		return err
	}
	a.checks.Add("installer", a.inst.Ready)
	return nil
}

// run starts everything, serves until sig ends (SIGTERM or SIGINT) or a
// part fails, then shuts down.
func (a *agent) run(sig context.Context) error {
	defer a.close()
	// Reassert before serving: pods enrolled before a restart keep capture.
	if err := a.store.Reconcile(a.ctx); err != nil {
		a.log.Warn("reconcile at start left errors", "err", err)
	}
	if err := a.startBackground(); err != nil {
		return err
	}
	hl, err := a.serve()
	if err != nil {
		return err
	}
	go a.store.Resync(a.ctx, a.cfg.resync)
	a.startTaintRemoval()
	if a.inst != nil {
		a.goErr("installer", a.inst.Run)
	}
	a.log.Info("serving", "socket", a.cfg.socket, "health_addr", hl.Addr().String())

	select {
	case <-sig.Done():
		a.log.Info("signal received; draining", "timeout", a.cfg.drain)
	case err := <-a.errc:
		a.gs.Stop()
		a.hsrv.Close()
		return err
	}
	a.shutdown()
	return nil
}

// startBackground starts ZDS, the informers and the checks of running pods.
func (a *agent) startBackground() error {
	if a.amb != nil {
		go func() {
			defer close(a.zdsDone)
			if err := a.amb.zds.Run(a.ctx); err != nil {
				a.errc <- fmt.Errorf("ztunnel server: %w", err)
			}
		}()
	}
	if a.kube == nil {
		return nil
	}
	if a.amb != nil {
		if err := learnProbeAddrs(a.informers.Pods, a.store, a.log.With("component", "probe-addrs")); err != nil {
			return err
		}
	}
	// Every handler is registered by now but podcheck's, which waits for
	// the caches to sync and is then sent what they hold.
	go a.informers.Run(a.ctx)
	a.checks.Add("policy", a.kube.Synced)
	return a.startRepair()
}

// serve builds the gRPC services over the store and starts the socket and
// the health server; an NRI trigger goes through the same CNI service.
func (a *agent) serve() (net.Listener, error) {
	cni := &rpc.CNI{Policy: a.pol, Workloads: a.store, Ready: a.checks.Ready, Inflight: rpc.NewInflight(a.cfg.maxInflight),
		Events: a.rec, Decisions: a.decisions, Addrs: a.opener}
	if a.rep != nil {
		cni.Redirection = a.rep.Redirection()
	}
	if a.cfg.trigger != triggerCNI {
		startNRI(a.ctx, a.cfg, cni, a.store, a.checks, a.log)
	}
	a.auth = rpc.NewAuthorizer(a.uids(), a.log.With("component", "rpc"))
	debug := &rpc.Debug{Workloads: a.store, Policy: a.pol, ExcludeNamespaces: splitList(a.cfg.excludeNamespaces)}
	if a.amb != nil {
		debug.ZDS, debug.ZtunnelSocket = a.amb.zds, a.cfg.ztunnelSocket
	}
	a.gs, a.hs = rpc.NewServer(cni, debug, a.auth, a.metrics.Unary, a.log.With("component", "rpc"))
	lis, err := rpc.Listen(a.cfg.socket)
	if err != nil {
		return nil, err
	}
	// Closing removes the file only while it is still ours.
	a.closers = append(a.closers, func() { lis.Close() })
	a.checks.AddLiveness("socket", lis.Ours)
	a.checks.Add("grpc", socketServes(a.cfg.socket))
	a.registerMetrics()

	go func() { a.errc <- a.gs.Serve(lis) }()
	// Readiness is computed here, on the agent's schedule; /readyz,
	// /metrics and CNI STATUS read the last verdict.
	go a.checks.Run(a.ctx, checkPeriod)
	a.hsrv = health.NewServer(health.Handler(a.checks, a.metrics.Handler()))
	hl, err := health.Listen(a.cfg.healthAddr)
	if err != nil {
		a.gs.Stop()
		return nil, err
	}
	go func() { a.errc <- a.hsrv.Serve(hl) }()
	a.hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	return hl, nil
}

// startTaintRemoval removes the node's startup taint once the agent is
// ready: entry installed, caches synced, socket serving (in Kubernetes
// only; standalone there is no node object).
func (a *agent) startTaintRemoval() {
	if a.client == nil || a.cfg.startupTaint == "" {
		return
	}
	r := &nodetaint.Remover{Client: a.client, Node: a.cfg.nodeName, Key: a.cfg.startupTaint, Ready: a.checks.Ready,
		Log: a.log.With("component", "startup-taint"), Poll: 100 * time.Millisecond, MaxBackoff: 30 * time.Second}
	go r.Run(a.ctx)
}

// uids were checked by parseConfig.
func (a *agent) uids() []uint32 {
	uids, _ := a.cfg.uids()
	return uids
}

// goErr runs a background part whose failure ends the agent.
func (a *agent) goErr(name string, run func(context.Context) error) {
	go func() {
		if err := run(a.ctx); err != nil {
			a.errc <- fmt.Errorf("%s: %w", name, err)
		}
	}()
}

// shutdown keeps the order that keeps pods safe: the conflist entry out
// (an uninstall only) → drain the calls in flight → stop the background →
// the host probe table out (an uninstall only).
func (a *agent) shutdown() {
	a.hs.Shutdown()
	leaving := (a.inst != nil || a.amb != nil) && uninstallOnExit(a.cfg, a.rc, a.log)
	a.left = leaving
	if leaving && a.inst != nil {
		// Before the drain: new pods should stop calling a leaving agent.
		if err := a.inst.Uninstall(); err != nil {
			a.log.Error("uninstall on exit", "err", err)
		} else {
			a.log.Info("removed the sluice conflist entry")
		}
	}
	drain(a.gs, a.cfg.drain)
	a.stopBackground()
	// The ZDS server unlinks its socket as Run returns; an exit that does
	// not wait for it leaves the socket behind (seen under load).
	select {
	case <-a.zdsDone:
	case <-time.After(5 * time.Second):
		a.log.Warn("ztunnel server did not stop within 5s")
	}
	if leaving && a.amb != nil {
		// After the drain: an ambient ADD still in flight needs the table.
		if err := a.amb.uninstall(); err != nil {
			a.log.Error("remove the host probe table on exit", "err", err)
		}
	}
	a.hsrv.Close()
}

// close undoes what newAgent and run acquired, last first: the socket
// file, queued Events, the state dir lock, the background context.
func (a *agent) close() {
	for i := len(a.closers) - 1; i >= 0; i-- {
		a.closers[i]()
	}
	a.closers = nil
}

// drain lets in-flight calls finish (a pod's ADD half-done is worse than a
// slow exit), then cuts the rest.
func drain(gs *grpc.Server, timeout time.Duration) {
	done := make(chan struct{})
	go func() { gs.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-time.After(timeout):
		gs.Stop()
	}
}

// checkPeriod is how often a ready agent runs its readiness checks (sooner
// while not ready); a change is seen by /readyz and STATUS within it.
const checkPeriod = time.Second

// socketServes is ready when a real gRPC health call over the socket works,
// which is what the plugin needs.
func socketServes(socket string) health.Check {
	return func() (bool, string) {
		conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return false, err.Error()
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
		if err != nil {
			return false, "socket " + socket + ": " + err.Error()
		}
		if resp.Status != healthpb.HealthCheckResponse_SERVING {
			return false, "socket " + socket + ": " + resp.Status.String()
		}
		return true, ""
	}
}
