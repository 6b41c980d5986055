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
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

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
	"github.com/sluicemesh/sluice/installer"
	"github.com/sluicemesh/sluice/internal/buildinfo"
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
	store, err := workloads.Open(cfg.stateDir, opener, log.With("component", "workloads"))
	if err != nil {
		return err
	}
	var amb *ambientNode
	if cfg.ambient {
		if amb, err = newAmbient(cfg, opener, store, log); err != nil {
			return err
		}
	}
	// Repair before serving: pods enrolled before a restart keep capture.
	if err := store.Reconcile(ctx); err != nil {
		log.Warn("reconcile at start left errors", "err", err)
	}

	errc := make(chan error, 4)
	m := metrics.New()
	store.OnApply = func(d time.Duration) { m.ApplySeconds.Observe(d.Seconds()) }
	m.ByLabel("gauge", "workloads_enrolled", "Enrolled workloads by capture mode.", "mode",
		[]string{string(redirect.ModeSidecar), string(redirect.ModeAmbient)}, store.CountByMode)
	decisions := events.NewDecisions(log.With("component", "cni"))
	m.ByLabel("counter", "pods_passed_through_total", "ADDs the agent passed through uncaptured, by reason (the log line has the full text).",
		"reason", events.PassReasons, decisions.PassedThrough)
	m.Func("counter", "istio_init_pods_total", "Pods seen with istio-init injected (istiod not in CNI mode), once each.",
		func() float64 { return float64(decisions.IstioInitPods()) })
	m.Func("counter", "drift_repairs_total", "Rulesets re-applied because the kernel drifted.", func() float64 { return float64(store.Repairs()) })

	if amb != nil {
		m.Func("gauge", "ztunnel_connections", "ztunnel instances connected over ZDS.", func() float64 { return float64(amb.zds.Connections()) })
		go func() {
			if err := amb.zds.Run(ctx); err != nil {
				errc <- fmt.Errorf("ztunnel server: %w", err)
			}
		}()
	}

	checks := &health.Checks{}
	var rec *events.Recorder // nil records nothing (standalone)
	var redirection *repair.Redirection
	if kube != nil {
		go kube.Run(ctx)
		checks.Add("policy", kube.Synced)
		m.Bool("policy_caches_synced", "1 once the pod and namespace informers have synced.", func() bool {
			ok, _ := kube.Synced()
			return ok
		})
		if rec, redirection, err = startRepair(ctx, cfg, rc, kube, store, m, log); err != nil {
			return err
		}
		defer flushEvents(rec)
	}
	var inst *installer.Installer
	if cfg.install {
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
	gs, hs := rpc.NewServer(cni, &rpc.Debug{Workloads: store, Policy: pol, ExcludeNamespaces: splitList(cfg.excludeNamespaces)}, rpc.Authorizer{AllowedUIDs: uids}, m.Unary, log.With("component", "rpc"))
	lis, err := rpc.Listen(cfg.socket)
	if err != nil {
		return err
	}
	defer os.Remove(cfg.socket)
	checks.Add("grpc", socketServes(cfg.socket))

	go func() { errc <- gs.Serve(lis) }()
	hsrv := &http.Server{Addr: cfg.healthAddr, Handler: health.Handler(checks, m.Handler()), ReadHeaderTimeout: 5 * time.Second}
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
		return policy.NewStatic(redirect.DefaultSpec())
	case string(redirect.ModeAmbient):
		if !cfg.ambient {
			return nil, fmt.Errorf("--default-mode ambient needs --ambient")
		}
		spec := redirect.DefaultAmbientSpec()
		spec.CaptureDNS = cfg.ambientDNSCapture
		return policy.NewStatic(spec)
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
