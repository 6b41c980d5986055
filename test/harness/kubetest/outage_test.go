package kubetest

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
)

// recorder is a testing.TB that records how a test ended.
type recorder struct {
	testing.TB
	name            string
	failed, skipped string
}

func (r *recorder) Helper()      {}
func (r *recorder) Name() string { return r.name }
func (r *recorder) Fatalf(f string, a ...any) {
	r.failed = fmt.Sprintf(f, a...)
	runtime.Goexit()
}
func (r *recorder) Skipf(f string, a ...any) {
	r.skipped = fmt.Sprintf(f, a...)
	runtime.Goexit()
}

// run calls report as test name would, in a goroutine of its own as the
// testing package runs each test (Fatalf and Skipf end it).
func run(o *outage, name string, err error) *recorder {
	r := &recorder{name: name}
	done := make(chan struct{})
	go func() { defer close(done); o.report(r, err) }()
	<-done
	return r
}

// Without the binary, the first test fails with the command that builds
// it and every later one skips naming that test: one failure per package.
func TestMissingBinaryFailsOnce(t *testing.T) {
	t.Setenv("SLUICE_KUBE_APISERVER", "")
	t.Setenv("SLUICE_CACHE", t.TempDir())
	_, err := apiserverBinary()
	if err == nil || !strings.Contains(err.Error(), "make kube-apiserver") {
		t.Fatalf("lookup in an empty cache: %v, want an error naming `make kube-apiserver`", err)
	}
	var o outage
	first := run(&o, "TestA", err)
	if !strings.Contains(first.failed, "make kube-apiserver") || first.skipped != "" {
		t.Errorf("first test: failed %q, skipped %q; want a failure naming the command", first.failed, first.skipped)
	}
	for _, name := range []string{"TestB", "TestC"} {
		r := run(&o, name, errors.New("a later cause"))
		if r.failed != "" || !strings.Contains(r.skipped, "TestA failed") {
			t.Errorf("%s: failed %q, skipped %q; want a skip pointing at TestA", name, r.failed, r.skipped)
		}
	}
	if got := o.get(); got != err {
		t.Errorf("recorded cause %v, want the first one", got)
	}
}
