package kubetest

import (
	"sync"
	"testing"
)

// outage is why no API server can run in this test binary (the binary is
// not built, etcd is missing, the server would not start), and the test
// that said so first. Every later test that asks for an API server is
// skipped with a pointer to that failure: the package fails once, with the
// command that fixes it, instead of once per test with the same words.
// The first failure is a real failure, so the package never passes.
type outage struct {
	mu    sync.Mutex
	err   error
	first string
}

var down outage

// get returns the recorded cause, if any.
func (o *outage) get() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.err
}

// report fails t if it is the first test to meet err, else skips it naming
// the test that failed; it does not return.
func (o *outage) report(t testing.TB, err error) {
	t.Helper()
	o.mu.Lock()
	if o.err == nil {
		o.err = err
	}
	first := o.first
	if first == "" {
		o.first = t.Name()
	}
	o.mu.Unlock()
	if first == "" {
		t.Fatalf("kube-apiserver: %v", err)
	}
	t.Skipf("no kube-apiserver in this package (%s failed with the cause and the fix)", first)
}
