// Command sluice-agent is the privileged node daemon of sluice: it serves
// the plugin's gRPC API, owns every pod's capture rules and keeps the
// plugin installed. This file is flags, wiring and signals — nothing else.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/sluicemesh/sluice/daemon/events"
	"github.com/sluicemesh/sluice/daemon/health"
	"github.com/sluicemesh/sluice/daemon/metrics"
	"github.com/sluicemesh/sluice/daemon/podns"
	"github.com/sluicemesh/sluice/daemon/policy"
	"github.com/sluicemesh/sluice/daemon/redirect"
	"github.com/sluicemesh/sluice/daemon/repair"
	"github.com/sluicemesh/sluice/daemon/rpc"
	"github.com/sluicemesh/sluice/daemon/workloads"
	"github.com/sluicemesh/sluice/daemon/ztunnel"
	"github.com/sluicemesh/sluice/installer"
	"github.com/sluicemesh/sluice/internal/buildinfo"
	"github.com/sluicemesh/sluice/internal/dirlock"
)

func main() {
	if isCommand(os.Args[1:]) {
		os.Exit(runCommand(os.Args[1], os.Args[2:], os.Getenv, os.Stdout, os.Stderr))
	}
	cfg, err := parseConfig(os.Args[1:], os.Getenv, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "sluice-agent:", err)
		os.Exit(2)
	}
	log, err := cfg.logger(os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "sluice-agent:", err)
		os.Exit(2)
	}
	if cfg.checkConfig { // parseConfig validated it
		fmt.Println("config ok")
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := run(ctx, cfg, log); err != nil {
		log.Error("exiting", "err", err)
		os.Exit(1)
	}
}

// run serves until sig (SIGTERM or SIGINT) ends, then drains. The background
// components (informers, ZDS, installer, resync) run on their own context,
// cancelled only after the drain: an in-flight ADD may still need them (an
// ambient ADD waits for ztunnel's ack).
func run(sig context.Context, cfg *config, log *slog.Logger) error {
	ctx, stopBackground := context.WithCancel(context.Background())
	defer stopBackground()
	log.Info("starting", "version", buildinfo.Version, "socket", cfg.socket, "state_dir", cfg.stateDir)
	uids, err := cfg.uids()
	if err != nil {
		return err
	}
	var rc *rest.Config
	var kube *policy.Kube
	var pol rpc.Policy
	if cfg.kubeconfig != "" {
		if rc, err = restConfig(cfg.kubeconfig); err != nil {
			return err
		}
		if kube, err = newKubePolicy(cfg, rc, log); err != nil {
			return err
		}
		pol = kube
	} else if pol, err = staticPolicy(cfg); err != nil {
		return err
	}
	opener, err := podns.NewOpener(splitList(cfg.netnsRoots), cfg.hostProc)
	if err != nil {
		return err
	}
	// Before the journal is read: a second agent on this state dir would
	// re-apply what the first released.
	stateLock, err := dirlock.Acquire(cfg.stateDir, 0o700)
	if err != nil {
		return err
	}
	defer stateLock.Release()
	m := metrics.New()
	var client kubernetes.Interface
	var rec *events.Recorder // nil records nothing (standalone)
	if kube != nil {
		if client, rec, err = newEvents(cfg, rc, log); err != nil {
			return err
		}
		defer flushEvents(rec)
	}
	var store *workloads.Store
	var amb *ambientNode
	if cfg.ambient {
		// ZDS reads the store only once it serves, after the Open below.
		snapshot := func() []ztunnel.Workload { return store.ZtunnelSnapshot() }
		records := func() []workloads.Record { return store.List() }
		if amb, err = newAmbient(cfg, opener, snapshot, records, kube, log); err != nil {
			return err
		}
	}
	if store, err = openStore(cfg, opener, amb, m, rec, log); err != nil {
		return err
	}
	// Reassert before serving: pods enrolled before a restart keep capture.
	if err := store.Reconcile(ctx); err != nil {
		log.Warn("reconcile at start left errors", "err", err)
	}

	errc := make(chan error, 4)
	decisions := events.NewDecisions(log.With("component", "cni"))
	m.ByLabel("gauge", "workloads_enrolled", "Enrolled workloads by capture mode.", "mode",
		[]string{string(redirect.ModeSidecar), string(redirect.ModeAmbient)}, store.CountByMode)
	m.ByLabel("counter", "pods_passed_through_total", "ADDs the agent passed through uncaptured, by reason (the log line has the full text).",
		"reason", events.PassReasons, decisions.PassedThrough)
	m.Func("counter", "istio_init_pods_total", "Pods seen with istio-init injected (istiod not in CNI mode), once each.",
		func() float64 { return float64(decisions.IstioInitPods()) })
	m.Func("counter", "ruleset_reasserts_total", "Rulesets reasserted (re-applied) because the kernel drifted.", func() float64 { return float64(store.Reasserts()) })

	zdsDone := make(chan struct{})
	if amb != nil {
		m.Func("gauge", "ztunnel_connections", "ztunnel instances connected over ZDS.", func() float64 { return float64(amb.zds.Connections()) })
		go func() {
			defer close(zdsDone)
			if err := amb.zds.Run(ctx); err != nil {
				errc <- fmt.Errorf("ztunnel server: %w", err)
			}
		}()
	} else {
		close(zdsDone)
	}

	checks := &health.Checks{}
	var redirection *repair.Redirection
	if kube != nil {
		go kube.Run(ctx)
		checks.Add("policy", kube.Synced)
		m.Bool("policy_caches_synced", "1 once the pod and namespace informers have synced.", func() bool {
			ok, _ := kube.Synced()
			return ok
		})
		var ztunnelReady func() (bool, string)
		if amb != nil {
			ztunnelReady = amb.zds.Ready
		}
		if redirection, err = startRepair(ctx, cfg, client, rec, kube, store, m, ztunnelReady, log); err != nil {
			return err
		}
	}
	var inst *installer.Installer
	if cfg.installs() {
		if inst, err = newInstaller(cfg, log); err != nil {
			return err
		}
		checks.Add("installer", inst.Ready)
		m.Func("counter", "installer_writes_total", "Files the installer wrote (installs and repairs).", func() float64 { return float64(inst.Stats().Writes) })
		m.Func("counter", "installer_restores_total", "Repairs of a binary or entry someone else removed or changed.", func() float64 { return float64(inst.Stats().Restores) })
	}
	m.Bool("ready", "1 when the agent takes pods (what /readyz and CNI STATUS say), else 0.", func() bool {
		ok, _ := checks.Ready()
		return ok
	})
	cni := &rpc.CNI{Policy: pol, Workloads: store, Ready: checks.Ready, Inflight: rpc.NewInflight(cfg.maxInflight), Events: rec,
		Redirection: redirection, Decisions: decisions}
	if cfg.trigger != triggerCNI {
		startNRI(ctx, cfg, cni, store, checks, log)
	}
	auth := rpc.NewAuthorizer(uids, log.With("component", "rpc"))
	m.Func("counter", "rpc_refused_connections_total", "Connections to the agent socket refused at the handshake (peer uid not allowed).", func() float64 { return float64(auth.Refused()) })
	gs, hs := rpc.NewServer(cni, &rpc.Debug{Workloads: store, Policy: pol, ExcludeNamespaces: splitList(cfg.excludeNamespaces)}, auth, m.Unary, log.With("component", "rpc"))
	lis, err := rpc.Listen(cfg.socket)
	if err != nil {
		return err
	}
	defer removeIfOurs(lis, cfg.socket)
	checks.AddLiveness("socket", lis.Ours)
	checks.Add("grpc", socketServes(cfg.socket))

	go func() { errc <- gs.Serve(lis) }()
	hsrv := health.NewServer(health.Handler(checks, m.Handler()))
	hl, err := net.Listen("tcp", cfg.healthAddr)
	if err != nil {
		gs.Stop()
		return fmt.Errorf("health listener %s: %w", cfg.healthAddr, err)
	}
	go func() { errc <- hsrv.Serve(hl) }()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	go store.Resync(ctx, cfg.resync)
	if inst != nil {
		go func() {
			if err := inst.Run(ctx); err != nil {
				errc <- fmt.Errorf("installer: %w", err)
			}
		}()
	}
	log.Info("serving", "socket", cfg.socket, "health_addr", hl.Addr().String())

	select {
	case <-sig.Done():
		log.Info("signal received; draining", "timeout", cfg.drain)
	case err := <-errc:
		gs.Stop()
		hsrv.Close()
		return err
	}
	hs.Shutdown()
	leaving := (inst != nil || amb != nil) && uninstallOnExit(cfg, rc, log)
	if leaving && inst != nil {
		// Before the drain: new pods should stop calling a leaving agent.
		if err := inst.Uninstall(); err != nil {
			log.Error("uninstall on exit", "err", err)
		} else {
			log.Info("removed the sluice conflist entry")
		}
	}
	drain(gs, cfg.drain)
	stopBackground()
	// The ZDS server unlinks its socket as Run returns; an exit that does
	// not wait for it leaves the socket behind (seen under load).
	select {
	case <-zdsDone:
	case <-time.After(5 * time.Second):
		log.Warn("ztunnel server did not stop within 5s")
	}
	if leaving && amb != nil {
		// After the drain: an ambient ADD still in flight needs the table.
		if err := amb.uninstall(); err != nil {
			log.Error("remove the host probe table on exit", "err", err)
		}
	}
	hsrv.Close()
	return nil
}

func staticPolicy(cfg *config) (rpc.Policy, error) {
	switch cfg.defaultMode {
	case string(redirect.ModeSidecar):
		return policy.NewStatic(redirect.DefaultSpec(), splitList(cfg.excludeNamespaces)...)
	case string(redirect.ModeAmbient):
		if !cfg.ambient {
			return nil, fmt.Errorf("--default-mode ambient needs --ambient")
		}
		spec := redirect.DefaultAmbientSpec()
		spec.CaptureDNS = cfg.ambientDNSCapture
		return policy.NewStatic(spec, splitList(cfg.excludeNamespaces)...)
	}
	return nil, fmt.Errorf("--default-mode %q: want sidecar or ambient", cfg.defaultMode)
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

// removeIfOurs removes the socket file on exit unless another agent's has
// taken its place.
func removeIfOurs(lis *rpc.Listener, path string) {
	if ok, _ := lis.Ours(); ok {
		os.Remove(path)
	}
}
