package nri

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
)

// The reconnect backoff: the stub does not reconnect by itself, and the
// runtime may be restarting.
const (
	minBackoff = 100 * time.Millisecond
	maxBackoff = 5 * time.Second
)

// Run keeps the plugin connected to the runtime's NRI socket until ctx
// ends, reconnecting after every drop with a backoff that doubles up to
// maxBackoff and starts over after a connection that lasted.
func (p *Plugin) Run(ctx context.Context, socket string) error {
	backoff := minBackoff
	for {
		start := time.Now()
		err := p.serve(ctx, socket)
		if ctx.Err() != nil {
			return nil
		}
		if time.Since(start) > maxBackoff {
			backoff = minBackoff
		}
		p.log.Warn("NRI connection ended; reconnecting", "socket", socket, "err", err, "in", backoff)
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return nil
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// serve runs one connection until it drops or ctx ends.
func (p *Plugin) serve(ctx context.Context, socket string) error {
	s, err := stub.New(p,
		stub.WithPluginName(Name),
		stub.WithPluginIdx(Index),
		stub.WithSocketPath(socket),
		stub.WithLogger(logger{p.log.With("component", "nri-stub")}),
		stub.WithOnClose(func() {}), // the connection's end is seen by Wait
		// Runtimes that know failure policies fail a pod whose event timed
		// out instead of starting it uncaptured; others ignore this.
		stub.WithFailurePolicy(&api.FailurePolicy{FailRequest: true, KeepConnected: true}),
	)
	if err != nil {
		return fmt.Errorf("NRI plugin: %w", err)
	}
	p.mu.Lock()
	p.timeout = s.RequestTimeout
	p.mu.Unlock()
	if err := s.Start(ctx); err != nil {
		return fmt.Errorf("connect to NRI socket %s: %w", socket, err)
	}
	p.setConnected(true)
	defer p.setConnected(false)
	p.log.Info("connected to the runtime over NRI", "socket", socket, "plugin", Index+"-"+Name,
		"runtime", p.Runtime(), "request_timeout", s.RequestTimeout())
	if p.onConnected != nil {
		p.onConnected(p.Runtime())
	}
	stop := context.AfterFunc(ctx, s.Stop)
	defer stop()
	s.Wait()
	return errors.New("connection closed")
}

func (p *Plugin) setConnected(v bool) {
	p.mu.Lock()
	p.connected = v
	p.mu.Unlock()
}

// Ready is the NRI part of /readyz: connected and configured.
func (p *Plugin) Ready() (bool, string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.connected {
		return false, "nri: not connected to the runtime's NRI socket"
	}
	return true, ""
}

// logger routes the stub's logs into slog.
type logger struct{ l *slog.Logger }

func (g logger) Debugf(ctx context.Context, f string, a ...any) {
	g.l.DebugContext(ctx, fmt.Sprintf(f, a...))
}
func (g logger) Infof(ctx context.Context, f string, a ...any) {
	g.l.DebugContext(ctx, fmt.Sprintf(f, a...)) // the stub is chatty; the agent logs what matters
}
func (g logger) Warnf(ctx context.Context, f string, a ...any) {
	g.l.WarnContext(ctx, fmt.Sprintf(f, a...))
}
func (g logger) Errorf(ctx context.Context, f string, a ...any) {
	g.l.ErrorContext(ctx, fmt.Sprintf(f, a...))
}
