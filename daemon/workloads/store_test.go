package workloads

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/sluicemesh/sluice/daemon/podns"
	"github.com/sluicemesh/sluice/daemon/redirect"
	"github.com/sluicemesh/sluice/daemon/redirect/kernel"
	"github.com/sluicemesh/sluice/test/harness/nstest"
)

const testNetwork = "test-net"

type fixture struct {
	root, state string
	kernel      *watched // kernel.Netlink, its calls counted
	store       *Store
	ambient     *Ambient // for stores opened after it is set
	heard       heard
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	nstest.RequireRoot(t)
	f := &fixture{root: t.TempDir(), state: t.TempDir(), kernel: &watched{Kernel: kernel.Netlink{}}}
	f.store = f.open(t)
	return f
}

func (f *fixture) opener(t testing.TB) *podns.Opener {
	t.Helper()
	o, err := podns.NewOpener([]string{f.root, "/proc"}, "/proc")
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func (f *fixture) open(t testing.TB) *Store {
	t.Helper()
	s, err := Open(Config{Dir: f.state, Opener: f.opener(t), Kernel: f.kernel, Log: slog.New(slog.DiscardHandler),
		Ambient: f.ambient, OnReassert: f.heard.reassert})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func (f *fixture) enroll(t testing.TB, id string) (*nstest.NS, Record) {
	t.Helper()
	ns := nstest.NewIn(t, f.root, id)
	r := Record{Attachment: Attachment{ContainerID: id, IfName: "eth0"}, Network: testNetwork, Netns: ns.Path, Spec: redirect.DefaultSpec()}
	if err := f.store.Enroll(context.Background(), r); err != nil {
		t.Fatalf("enroll %s: %v", id, err)
	}
	return ns, r
}

func hasTable(t *testing.T, ns *nstest.NS) bool {
	t.Helper()
	return ns.Command("nft", "list", "table", "inet", "sluice").Run() == nil
}

func TestJournalSurvivesGarbage(t *testing.T) {
	f := newFixture(t)
	os.WriteFile(filepath.Join(f.state, "bad:eth0.json"), []byte("{not json"), 0o600)
	os.WriteFile(filepath.Join(f.state, "renamed:eth0.json"), []byte(`{"containerID":"other","ifName":"eth0"}`), 0o600)
	os.WriteFile(filepath.Join(f.state, ".tmp-123"), []byte("half"), 0o600)
	s := f.open(t)
	if len(s.List()) != 0 {
		t.Fatalf("garbage loaded: %+v", s.List())
	}
	for _, name := range []string{"bad:eth0.json.corrupt", "renamed:eth0.json.corrupt"} {
		if _, err := os.Stat(filepath.Join(f.state, name)); err != nil {
			t.Errorf("%s not kept aside: %v", name, err)
		}
	}
	if _, err := os.Stat(filepath.Join(f.state, ".tmp-123")); !os.IsNotExist(err) {
		t.Error("stale temp file kept")
	}
}
