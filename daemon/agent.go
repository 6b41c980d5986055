package main

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	grpchealth "google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sluicemesh/sluice/daemon/ambientmesh"
	"github.com/sluicemesh/sluice/daemon/events"
	"github.com/sluicemesh/sluice/daemon/health"
	"github.com/sluicemesh/sluice/daemon/metrics"
	"github.com/sluicemesh/sluice/daemon/podns"
	"github.com/sluicemesh/sluice/daemon/rpc"
	"github.com/sluicemesh/sluice/daemon/tracing"
	"github.com/sluicemesh/sluice/daemon/workloads"
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

	// parts are the optional parts present, in start order (parts.go).
	parts []part

	k         *kubeSide // nil: standalone
	pol       rpc.Policy
	opener    *podns.Opener
	metrics   *metrics.Metrics
	decisions *events.Decisions
	amb       *ambientmesh.Node // nil without --ambient; the store and Debug use it
	store     *workloads.Store
	checks    *health.Checks
	mesh      *ambientmesh.Mesh // the ambient owner; without Kubernetes it marks nothing
	cni       *rpc.CNI
	auth      *rpc.Authorizer

	gs   *grpc.Server
	hs   *grpchealth.Server
	hsrv *http.Server
}

// newAgent builds every part; nothing serves or runs in the background yet.
func newAgent(cfg *config, log *slog.Logger) (*agent, error) {
	a := &agent{cfg: cfg, log: log, errc: make(chan error, 4), metrics: metrics.New(), checks: &health.Checks{},
		decisions: events.NewDecisions(log.With("component", "cni"))}
	a.ctx, a.stopBackground = context.WithCancel(context.Background())
	a.closers = append(a.closers, a.stopBackground)
	log.Info("starting", "version", buildinfo.Version, "socket", cfg.socket, "state_dir", cfg.stateDir)
	// Each step builds one thing and, for an optional part, appends it to
	// a.parts; a step sees everything the steps before it built.
	for _, build := range []func() error{a.buildTracing, a.buildKube, a.lockState, a.buildTaint, a.buildAmbient,
		a.buildStore, a.buildInstaller, a.addAmbient, a.buildRepair, a.buildCondition, a.buildCNI, a.buildNRI} {
		if err := build(); err != nil {
			a.close()
			return nil, err
		}
	}
	return a, nil
}

// buildTracing installs the tracer provider the OTEL_* environment asks for
// (daemon/tracing) as OpenTelemetry's global, which rpc, workloads and
// ztunnel start their spans from. Its queued spans are flushed after the
// drain, at close, within tracing.FlushTimeout.
func (a *agent) buildTracing() error {
	attrs := []attribute.KeyValue{attribute.String("service.version", buildinfo.Version)}
	if a.cfg.nodeName != "" { // standalone agents may have none
		attrs = append(attrs, attribute.String("k8s.node.name", a.cfg.nodeName))
	}
	// Set first: the SDK reports a bad OTEL_TRACES_SAMPLER while it builds.
	log := a.log.With("component", "tracing")
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { log.Warn("tracing error", "err", err) }))
	tp, err := tracing.New(a.ctx, os.Getenv, attrs...)
	if err != nil {
		return err
	}
	otel.SetTracerProvider(tp.TracerProvider())
	if p := tp.Exporting(); p != "" {
		log.Info("exporting spans over OTLP", "protocol", p)
	}
	a.closers = append(a.closers, func() {
		if err := tp.Shutdown(); err != nil {
			log.Warn("flushing spans at exit", "err", err)
		}
	})
	return nil
}

// buildKube builds the Kubernetes side, or the static policy of a
// standalone agent.
func (a *agent) buildKube() (err error) {
	if a.cfg.kubeconfig == "" {
		a.pol, err = staticPolicy(a.cfg)
		return err
	}
	if a.k, err = newKubeSide(a.cfg, a.log); err != nil {
		return err
	}
	a.pol = a.k.policy
	a.parts = append(a.parts, &kubePart{informers: a.k.informers, kube: a.k.policy, checks: a.checks})
	a.closers = append(a.closers, func() { flushEvents(a.k.rec) })
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

func (a *agent) buildStore() (err error) {
	a.store, err = openStore(a.cfg, a.opener, a.amb.Workloads(), a.metrics, a.k.recorder(), a.log)
	return err
}

// run starts everything, serves until sig ends (SIGTERM or SIGINT) or a
// part fails, then shuts down.
func (a *agent) run(sig context.Context) error {
	defer a.close()
	// Reassert before serving: pods enrolled before a restart keep capture.
	if err := a.store.Reconcile(a.ctx); err != nil {
		a.log.Warn("reconcile at start left errors", "err", err)
	}
	if err := a.startParts(); err != nil {
		return err
	}
	hl, err := a.serve()
	if err != nil {
		return err
	}
	go a.store.Resync(a.ctx, min(a.cfg.verify, a.cfg.resync), a.cfg.resync)
	for _, p := range a.parts {
		p.serving(a.ctx, a.fail)
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

// buildCNI builds the CNI service over the store: the socket's, and the
// NRI trigger's.
func (a *agent) buildCNI() error {
	a.cni = &rpc.CNI{Policy: a.pol, Workloads: a.store, Ready: a.checks.Ready, Inflight: rpc.NewInflight(a.cfg.maxInflight),
		Events: a.k.recorder(), Decisions: a.decisions, Addrs: a.opener}
	a.cni.Ambient = a.mesh
	return nil
}

// serve starts the socket's gRPC services and the health server.
func (a *agent) serve() (net.Listener, error) {
	a.auth = rpc.NewAuthorizer(a.uids(), a.log.With("component", "rpc"))
	debug := &rpc.Debug{Workloads: a.store, Policy: a.pol, ExcludeNamespaces: splitList(a.cfg.excludeNamespaces)}
	if a.amb != nil {
		debug.ZDS, debug.ZtunnelSocket = a.amb.ZDS(), a.cfg.ztunnelSocket
	}
	a.gs, a.hs = rpc.NewServer(a.cni, debug, a.auth, a.metrics.Unary, a.log.With("component", "rpc"))
	lis, err := rpc.Listen(a.cfg.socket)
	if err != nil {
		return nil, err
	}
	// Closing removes the file only while it is still ours.
	a.closers = append(a.closers, func() { lis.Close() })
	a.checks.AddLiveness("socket", lis.Ours)
	a.checks.Add("grpc", socketServes(a.cfg.socket))
	a.registerMetrics(lis)
	go lis.Keep(a.ctx, func(err error) {
		if err != nil {
			a.log.Error("agent socket removed; cannot listen again (retrying)", "socket", a.cfg.socket, "err", err)
			return
		}
		a.log.Warn("agent socket removed; listening again", "socket", a.cfg.socket, "restores", lis.Restored())
	})

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

// uids were checked by parseConfig.
func (a *agent) uids() []uint32 {
	uids, _ := a.cfg.uids()
	return uids
}

// shutdown keeps the order that keeps pods safe: the conflist entry out
// (an uninstall only) → drain the calls in flight → stop the background →
// the host probe table out (an uninstall only).
func (a *agent) shutdown() {
	a.hs.Shutdown()
	leaving := a.leavesState() && uninstallOnExit(a.cfg, a.k.config(), a.log)
	a.left = leaving
	a.stopParts(leaving, false)
	drain(a.gs, a.cfg.drain)
	a.stopBackground()
	a.stopParts(leaving, true)
	a.hsrv.Close()
}

// close undoes what newAgent and run acquired, last first: the socket
// file, the ambient node, queued Events, the state dir lock, the
// background context.
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
