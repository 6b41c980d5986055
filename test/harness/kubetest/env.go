// Package kubetest runs a real kube-apiserver backed by a real etcd for
// tests: loopback only, temp dirs, RBAC on, token users. Nothing schedules
// pods and no controllers run: tests set spec.nodeName themselves, and
// namespaces have no default ServiceAccount (the admission plugin that
// would demand one is off).
//
// Start it once per package from TestMain with StartMain, or per test with
// Start; both clean up after themselves, and the children die with the test
// binary even when it is killed.
package kubetest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"
)

// Admin is the user with every permission (group system:masters).
const Admin = "admin"

// Env is one running etcd and kube-apiserver.
type Env struct {
	dir     string // everything on disk: etcd data, certs, keys, tokens, logs
	etcd    *process
	etcdURL string
	bin     string
	port    int

	mu        sync.Mutex
	apiserver *process
	users     map[string]user
	audit     bool
}

// StartMain starts an Env for a whole test package; call it from TestMain
// and run the returned stop after m.Run. users are token users registered
// before the API server first starts (each has no permissions until a test
// binds it to a role); adding them later with AddUser costs a restart.
func StartMain(users ...string) (*Env, func(), error) {
	return StartMainWith(Options{}, users...)
}

// Options are what an Env may add to the API server the tests share.
type Options struct {
	// Audit has the API server log every request at the Metadata level
	// (who, verb, resource; no bodies) for Env.Audit: what a client asks
	// of the API server, counted by the API server itself.
	Audit bool
}

// StartMainWith is StartMain with opts.
func StartMainWith(opts Options, users ...string) (*Env, func(), error) {
	bin, err := apiserverBinary()
	if err != nil {
		return nil, nil, err
	}
	dir, err := os.MkdirTemp("", "kubetest-")
	if err != nil {
		return nil, nil, fmt.Errorf("create kubetest dir: %w", err)
	}
	e := &Env{dir: dir, bin: bin, users: map[string]user{}, audit: opts.Audit}
	fail := func(err error) (*Env, func(), error) {
		e.Stop()
		return nil, nil, err
	}
	if err := e.addUsers([]string{Admin}, []string{"system:masters"}); err != nil {
		return fail(err)
	}
	if err := e.addUsers(users, nil); err != nil {
		return fail(err)
	}
	if err := e.writeTokens(); err != nil {
		return fail(err)
	}
	if err := writeServiceAccountKey(dir); err != nil {
		return fail(err)
	}
	if e.port, err = freePort(); err != nil {
		return fail(err)
	}
	if e.etcd, e.etcdURL, err = startEtcd(dir); err != nil {
		return fail(err)
	}
	if err := e.StartAPIServer(); err != nil {
		return fail(err)
	}
	return e, e.Stop, nil
}

// Start is StartMain for one test: the Env stops when t ends. Once one
// start has failed in this test binary, later tests skip, pointing at the
// failure (see outage).
func Start(t testing.TB, users ...string) *Env {
	t.Helper()
	return StartWith(t, Options{}, users...)
}

// StartWith is Start with opts.
func StartWith(t testing.TB, opts Options, users ...string) *Env {
	t.Helper()
	if err := down.get(); err != nil {
		down.report(t, err)
	}
	e, stop, err := StartMainWith(opts, users...)
	if err != nil {
		down.report(t, err)
	}
	t.Cleanup(stop)
	return e
}

// Stop shuts the API server and etcd down and removes every file the Env
// wrote. It is safe to call more than once.
func (e *Env) Stop() {
	e.StopAPIServer()
	if e.etcd != nil {
		e.etcd.Stop(10 * time.Second)
	}
	if e.dir != "" {
		_ = os.RemoveAll(e.dir)
	}
}

// Host is the API server's URL.
func (e *Env) Host() string {
	return fmt.Sprintf("https://127.0.0.1:%d", e.port)
}

// StopAPIServer stops the API server and leaves etcd running, so a test can
// see what its code does while the API is away.
func (e *Env) StopAPIServer() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.apiserver != nil {
		// An open watch holds kube-apiserver's graceful shutdown for many
		// seconds; its state is all in etcd, so a short grace loses nothing.
		e.apiserver.Stop(2 * time.Second)
		e.apiserver = nil
	}
}

// StartAPIServer (re)starts the API server on the same port, with the same
// etcd, certificates and users, and waits until /readyz is green.
func (e *Env) StartAPIServer() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.apiserver != nil {
		return errors.New("start kube-apiserver: already running")
	}
	p, err := e.startAPIServer()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if err := waitHTTP(ctx, p, insecureClient(), e.Host()+"/readyz", e.users[Admin].token); err != nil {
		p.Stop(5 * time.Second)
		return fmt.Errorf("wait for kube-apiserver at %s: %w\n%s", e.Host(), err, p.LogTail())
	}
	e.apiserver = p
	return nil
}
