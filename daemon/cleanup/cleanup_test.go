package cleanup

import (
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sluicemesh/sluice/daemon/podns"
	"github.com/sluicemesh/sluice/daemon/redirect"
	"github.com/sluicemesh/sluice/daemon/redirect/kernel"
	"github.com/sluicemesh/sluice/daemon/workloads"
	"github.com/sluicemesh/sluice/test/harness/nstest"
)

// cleanupNode is a node's worth of cleanup's flags in temp dirs: its own
// netns root and a netns standing in for the host's (cleanup removes the
// host probe table there), nothing installed.
func cleanupNode(t *testing.T) Config {
	t.Helper()
	nstest.RequireRoot(t)
	dir := t.TempDir()
	roots := filepath.Join(dir, "netns")
	if err := os.Mkdir(roots, 0o755); err != nil {
		t.Fatal(err)
	}
	return Config{StateDir: filepath.Join(dir, "state"), Socket: filepath.Join(dir, "run", "agent.sock"),
		ZtunnelSocket: filepath.Join(dir, "zt", "ztunnel.sock"), NetnsRoots: []string{roots}, HostProc: "/proc",
		HostNetns: nstest.New(t, "host").Path, Log: slog.New(slog.DiscardHandler)}
}

// enrollOne opens the journal in cfg's state dir as the agent does and
// enrolls one pod there, which leaves its record and its table.
func enrollOne(t *testing.T, cfg Config) *nstest.NS {
	t.Helper()
	opener, err := podns.NewOpener(cfg.NetnsRoots, cfg.HostProc)
	if err != nil {
		t.Fatal(err)
	}
	s, err := workloads.Open(workloads.Config{Dir: cfg.StateDir, Opener: opener, Kernel: kernel.Netlink{}})
	if err != nil {
		t.Fatal(err)
	}
	pod := nstest.NewIn(t, cfg.NetnsRoots[0], "pod")
	r := workloads.Record{Attachment: workloads.Attachment{ContainerID: "c1", IfName: "eth0"}, Netns: pod.Path, Spec: redirect.DefaultSpec()}
	if err := s.Enroll(t.Context(), r); err != nil {
		t.Fatal(err)
	}
	return pod
}

func hasSluiceTable(ns *nstest.NS) bool {
	return ns.Command("nft", "list", "table", "inet", "sluice").Run() == nil
}

func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

// TestCleanupRefusesAStateDirThatIsNotSluices: --state-dir mistyped as a
// directory of the host's (here a conf dir holding a conflist and a .json)
// is refused, and cleanup touches nothing, there or elsewhere: before, it
// deleted every regular file in it and then the directory.
func TestCleanupRefusesAStateDirThatIsNotSluices(t *testing.T) {
	cfg := cleanupNode(t)
	if err := os.MkdirAll(cfg.StateDir, 0o755); err != nil {
		t.Fatal(err)
	}
	host := map[string]string{"10-bridge.conflist": `{"cniVersion":"1.0.0"}`, "99-extra.json": `{"x":1}`, "passwd": "root:x:0:0"}
	writeFiles(t, cfg.StateDir, host)
	err := Run(t.Context(), cfg)
	if err == nil || !strings.Contains(err.Error(), "not sluice's") {
		t.Errorf("cleanup on a host directory: %v, want a refusal", err)
	}
	if got, want := dirNames(t, cfg.StateDir), []string{"10-bridge.conflist", "99-extra.json", "passwd"}; !slices.Equal(got, want) {
		t.Fatalf("the directory holds %q after cleanup, want %q untouched", got, want)
	}
	for name, body := range host {
		if b, _ := os.ReadFile(filepath.Join(cfg.StateDir, name)); string(b) != body {
			t.Errorf("%s changed: %q", name, b)
		}
	}
}

// TestCleanupRemovesOnlyTheJournals: in the agent's own state dir, cleanup
// removes the pod's table, its record, records moved aside and temp files,
// and leaves what someone else put there (and so the dir, which is not
// empty); before, it deleted every regular file.
func TestCleanupRemovesOnlyTheJournals(t *testing.T) {
	cfg := cleanupNode(t)
	pod := enrollOne(t, cfg)
	writeFiles(t, cfg.StateDir, map[string]string{"c0:eth0.json.corrupt": "{", ".tmp-42": "half",
		"README": "the operator's notes", "notes.json": "{not a record"})
	if err := Run(t.Context(), cfg); err != nil {
		t.Fatalf("cleanup: %v", err)
	}
	if hasSluiceTable(pod) {
		t.Error("the pod's table is still there")
	}
	got := dirNames(t, cfg.StateDir)
	for _, gone := range []string{"c1:eth0.json", "c0:eth0.json.corrupt", ".tmp-42"} {
		if slices.Contains(got, gone) {
			t.Errorf("%s left after cleanup", gone)
		}
	}
	for _, kept := range []string{"README", "notes.json"} {
		if !slices.Contains(got, kept) {
			t.Errorf("cleanup removed %s, which is not sluice's", kept)
		}
	}
}

// TestCleanupOfAnEarlierAgentsStateDir: a state dir an agent from before
// the ownership marker left (records only) is still cleaned up whole, the
// directory included.
func TestCleanupOfAnEarlierAgentsStateDir(t *testing.T) {
	cfg := cleanupNode(t)
	pod := enrollOne(t, cfg)
	// As an earlier agent left it: its records and nothing else.
	for _, name := range dirNames(t, cfg.StateDir) {
		if !strings.HasSuffix(name, ".json") {
			os.Remove(filepath.Join(cfg.StateDir, name))
		}
	}
	if err := Run(t.Context(), cfg); err != nil {
		t.Fatalf("cleanup: %v", err)
	}
	if hasSluiceTable(pod) {
		t.Error("the pod's table is still there")
	}
	if _, err := os.Lstat(cfg.StateDir); !os.IsNotExist(err) {
		t.Errorf("state dir left after cleanup: %v", err)
	}
}
