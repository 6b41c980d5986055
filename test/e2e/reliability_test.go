package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sluicev1 "github.com/sluicemesh/sluice/api/sluice/v1"
	"github.com/sluicemesh/sluice/daemon/redirect"
	"github.com/sluicemesh/sluice/daemon/redirect/kernel"
	"github.com/sluicemesh/sluice/test/harness/nstest"
)

// loopbackChain is the cheapest real chain: the reference loopback plugin
// supplies a prevResult, sluice does the rest. Storm tests use it so that
// hundreds of pods cost no veths.
func (n *node) loopbackChain(timeout string) []byte {
	return []byte(fmt.Sprintf(`{"cniVersion":"1.1.0","name":"storm","plugins":[
  {"type":"loopback"},
  {"type":"sluice","socket":%q,"timeout":%q}]}`, n.Socket, timeout))
}

// rulesetState says whether a netns holds the full sluice ruleset ("full"),
// none ("none"), or anything else ("partial: ...").
func rulesetState(t *testing.T, pod *nstest.NS) string {
	t.Helper()
	rs, err := redirect.Build(redirect.DefaultSpec())
	if err != nil {
		t.Fatal(err)
	}
	h := pod.Handle(t)
	drift, err := kernel.Netlink{}.Verify(redirect.Netns(h), rs)
	if err != nil {
		t.Fatalf("verify %s: %v", pod.Name, err)
	}
	if len(drift) == 0 {
		return "full"
	}
	if out, err := pod.Command("nft", "list", "table", "inet", "sluice").CombinedOutput(); err != nil && strings.Contains(string(out), "No such file") {
		return "none"
	}
	return "partial: " + strings.Join(drift, "; ")
}

// 200 concurrent ADDs while the agent is SIGKILLed and restarted twice:
// every ADD either succeeds with the complete ruleset or errors; no netns
// is left half-programmed; after the dust settles the journal, the kernel
// and the set of successful ADDs agree exactly. Failed ADDs are DELeted,
// as a runtime does with a sandbox whose setup failed.
func TestStormSurvivesAgentKills(t *testing.T) {
	n := newNode(t)
	n.startAgent()
	c := n.cni(n.loopbackChain("2s"))
	const pods = 200
	ns := make([]*nstest.NS, pods)
	for i := range ns {
		ns[i] = n.Pod(fmt.Sprintf("storm-%03d", i))
	}

	var wg sync.WaitGroup
	errs := make([]error, pods)
	finished := make(chan struct{}, pods)
	for i := range ns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = c.Add(rt(fmt.Sprintf("storm%03d", i), ns[i]))
			finished <- struct{}{}
		}()
	}
	// Kill the agent twice while ADDs are in flight, restarting it each
	// time: after a fifth of the ADDs have finished, and again after the
	// next fifth. Counting finished calls, not started goroutines, keeps
	// the kills inside the storm on a loaded machine too (all 200 can start
	// before the first plugin exec connects; then every ADD met a dead
	// agent and the test proved nothing).
	for kill := 0; kill < 2; kill++ {
		for j := 0; j < pods/5; j++ {
			<-finished
		}
		n.agent.Cmd.Process.Signal(syscall.SIGKILL)
		<-n.agent.Done
		n.startAgent()
	}
	wg.Wait()

	ok := map[string]bool{}
	for i, err := range errs {
		id := fmt.Sprintf("storm%03d", i)
		if err == nil {
			ok[id] = true
			continue
		}
		if !strings.Contains(err.Error(), "sluice") {
			t.Errorf("ADD %s failed without a sluice error: %v", id, err)
		}
		if err := c.Del(rt(id, ns[i])); err != nil {
			t.Errorf("DEL after failed ADD %s: %v", id, err)
		}
	}
	t.Logf("%d of %d ADDs succeeded across two agent kills", len(ok), pods)
	for i, err := range errs {
		if err != nil {
			t.Logf("first failed ADD, storm%03d: %v", i, err)
			break
		}
	}
	if len(ok) == 0 {
		t.Fatal("no ADD succeeded")
	}

	journaled := map[string]bool{}
	for _, w := range n.Workloads(t) {
		journaled[w.ContainerId] = true
	}
	for i, pod := range ns {
		id := fmt.Sprintf("storm%03d", i)
		state := rulesetState(t, pod)
		switch {
		case ok[id] && (state != "full" || !journaled[id]):
			t.Errorf("%s: ADD succeeded but kernel=%s journaled=%v", id, state, journaled[id])
		case !ok[id] && (state != "none" || journaled[id]):
			t.Errorf("%s: ADD failed (then DEL) but kernel=%s journaled=%v", id, state, journaled[id])
		}
	}
}

// An agent restart, as a rolling upgrade makes one: the old agent exits
// (SIGTERM, or SIGKILL leaving its socket file), ADDs come while nothing
// listens, and the new agent starts. Each ADD waits for it within its
// deadline and enrols its pod, rules in, instead of failing for the
// runtime to try again after the kubelet's backoff.
func TestAddWaitsThroughAgentRestart(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		t.Run(sig.String(), func(t *testing.T) {
			n := newNode(t)
			a := n.startAgent()
			c := n.cni(n.loopbackChain("10s"))
			a.Cmd.Process.Signal(sig)
			<-a.Done
			const pods = 4
			errs := make([]error, pods)
			ns := make([]*nstest.NS, pods)
			var wg sync.WaitGroup
			for i := range ns {
				ns[i] = n.Pod(fmt.Sprintf("gap-%d", i))
				wg.Go(func() { _, errs[i] = c.Add(rt(fmt.Sprintf("gap%d", i), ns[i])) })
			}
			time.Sleep(time.Second) // the ADDs wait in the gap
			n.startAgent()
			wg.Wait()
			for i, err := range errs {
				if err != nil {
					t.Errorf("ADD gap%d across the agent's restart: %v", i, err)
				} else if state := rulesetState(t, ns[i]); state != "full" {
					t.Errorf("ADD gap%d succeeded with ruleset %s", i, state)
				}
			}
		})
	}
}

// A hung agent (SIGSTOP) mid-storm: every ADD fails within its timeout,
// none hangs; after SIGCONT the agent serves again.
func TestStormAgentStopped(t *testing.T) {
	n := newNode(t)
	a := n.startAgent()
	c := n.cni(n.loopbackChain("1s"))
	a.Cmd.Process.Signal(syscall.SIGSTOP)
	var wg sync.WaitGroup
	const pods = 30
	errs := make([]error, pods)
	for i := range pods {
		pod := n.Pod(fmt.Sprintf("stop-%02d", i))
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = c.Add(rt(fmt.Sprintf("stop%02d", i), pod))
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		a.Cmd.Process.Signal(syscall.SIGCONT)
		t.Fatal("ADDs against a stopped agent hung past 30s (timeout 1s)")
	}
	a.Cmd.Process.Signal(syscall.SIGCONT)
	for i, err := range errs {
		if err == nil || !strings.Contains(err.Error(), "not available") {
			t.Errorf("ADD %d against a stopped agent: %v, want 'not available'", i, err)
		}
	}
	pod := n.Pod("after")
	if _, err := c.Add(rt("after", pod)); err != nil {
		t.Fatalf("ADD after SIGCONT: %v", err)
	}
}

// Pods whose netns vanished while the agent was down leave no state once
// it is back.
func TestPodsDeletedWhileAgentDown(t *testing.T) {
	n := newNode(t)
	a := n.startAgent()
	c := n.cni(n.loopbackChain("2s"))
	var gone []*nstest.NS
	for i := range 5 {
		pod := n.Pod(fmt.Sprintf("gone-%d", i))
		if _, err := c.Add(rt(fmt.Sprintf("gone%d", i), pod)); err != nil {
			t.Fatal(err)
		}
		gone = append(gone, pod)
	}
	kept := n.Pod("kept")
	if _, err := c.Add(rt("kept", kept)); err != nil {
		t.Fatal(err)
	}
	a.Stop(t)
	for _, pod := range gone {
		if err := unix.Unmount(pod.Path, unix.MNT_DETACH); err != nil {
			t.Fatal(err)
		}
		os.Remove(pod.Path)
	}
	n.startAgent()
	ws := n.Workloads(t)
	if len(ws) != 1 || ws[0].ContainerId != "kept" {
		t.Fatalf("after restart the agent lists %v, want only kept", ws)
	}
	files, _ := filepath.Glob(filepath.Join(n.StateDir, "*.json"))
	if len(files) != 1 {
		t.Fatalf("journal holds %v, want one record", files)
	}
	if s := rulesetState(t, kept); s != "full" {
		t.Fatalf("kept pod lost its ruleset: %s", s)
	}
}

// Someone flushes the sluice table in 50 pods: the resync restores all.
func TestFlushedTablesRestored(t *testing.T) {
	n := newNode(t)
	n.startAgent("--resync-interval", "1s")
	c := n.cni(n.loopbackChain("2s"))
	var pods []*nstest.NS
	for i := range 50 {
		pod := n.Pod(fmt.Sprintf("flush-%02d", i))
		if _, err := c.Add(rt(fmt.Sprintf("flush%02d", i), pod)); err != nil {
			t.Fatal(err)
		}
		pods = append(pods, pod)
	}
	for _, pod := range pods {
		pod.Run(t, "nft", "flush", "table", "inet", "sluice")
	}
	nstest.Eventually(t, 10*time.Second, func() bool {
		for _, pod := range pods {
			if rulesetState(t, pod) != "full" {
				return false
			}
		}
		return true
	}, "flushed tables not all restored")
}

// A full or read-only state dir fails the ADD with a clear error and leaves
// nothing behind: no rules, no half-written record.
func TestStateDirFullOrReadOnly(t *testing.T) {
	n := newNode(t)
	if err := os.MkdirAll(n.StateDir, 0o700); err != nil {
		t.Fatal(err)
	}
	// mode=0700: the agent refuses a state dir others may write to (a
	// tmpfs root is 1777 by default).
	if err := unix.Mount("tmpfs", n.StateDir, "tmpfs", 0, "size=64k,mode=0700"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(n.StateDir, unix.MNT_DETACH) })
	n.startAgent()
	c := n.cni(n.loopbackChain("2s"))

	filler, err := os.Create(filepath.Join(n.StateDir, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := filler.Write(make([]byte, 4096)); err != nil {
			break
		}
	}
	filler.Close()
	full := n.Pod("full")
	if _, err := c.Add(rt("full", full)); err == nil || !strings.Contains(err.Error(), "journal") {
		t.Fatalf("ADD on a full disk = %v, want a journal error", err)
	}
	if s := rulesetState(t, full); s != "none" {
		t.Fatalf("failed ADD left kernel state: %s", s)
	}
	os.Remove(filepath.Join(n.StateDir, "filler"))

	if err := unix.Mount("", n.StateDir, "", unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
		t.Fatal(err)
	}
	ro := n.Pod("ro")
	if _, err := c.Add(rt("ro", ro)); err == nil || !strings.Contains(err.Error(), "read-only") {
		t.Fatalf("ADD on a read-only state dir = %v, want a read-only error", err)
	}
	if s := rulesetState(t, ro); s != "none" {
		t.Fatalf("failed ADD left kernel state: %s", s)
	}
	if err := unix.Mount("", n.StateDir, "", unix.MS_REMOUNT, ""); err != nil {
		t.Fatal(err)
	}
	ok := n.Pod("ok")
	if _, err := c.Add(rt("ok", ok)); err != nil {
		t.Fatalf("ADD once the disk is writable again: %v", err)
	}
	var names []string
	ents, _ := os.ReadDir(n.StateDir)
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if want := []string{".sluice-state", "ok:eth0.json"}; !slices.Equal(names, want) {
		t.Fatalf("state dir holds %q, want exactly the one record and the dir's marker %q", names, want)
	}
}

// 2,000 concurrent ADDs against --max-inflight 64: each either succeeds or
// is told to come back (ResourceExhausted / DeadlineExceeded, which the
// plugin maps to CNI 11), and the agent's memory stays bounded.
func TestAddStormBackpressure(t *testing.T) {
	n := newNode(t)
	n.startAgent("--max-inflight", "64")
	var pods []*nstest.NS
	for i := range 20 {
		pods = append(pods, n.Pod(fmt.Sprintf("bp-%02d", i)))
	}
	cni := sluicev1.NewCNIClient(n.Client())
	const calls = 2000
	var wg sync.WaitGroup
	var mu sync.Mutex
	codesSeen := map[codes.Code]int{}
	for i := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := contextWithTimeout(t, 2*time.Second)
			defer cancel()
			_, err := cni.Add(ctx, &sluicev1.AddRequest{ApiVersion: 1, ContainerId: "bp" + strconv.Itoa(i),
				Netns: pods[i%len(pods)].Path, IfName: "eth0"})
			mu.Lock()
			codesSeen[status.Code(err)]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	t.Logf("outcomes of %d concurrent ADDs: %v", calls, codesSeen)
	for code, count := range codesSeen {
		if code != codes.OK && code != codes.ResourceExhausted && code != codes.DeadlineExceeded {
			t.Errorf("%d ADDs failed with %s", count, code)
		}
	}
	if codesSeen[codes.OK] == 0 {
		t.Error("no ADD succeeded")
	}
	rss := agentRSS(t, n.agent)
	t.Logf("agent RSS after the storm: %d MiB", rss>>20)
	if rss > 256<<20 {
		t.Errorf("agent RSS %d MiB after 2,000 concurrent ADDs, want ≤ 256 MiB", rss>>20)
	}
	runtime.KeepAlive(pods)
}

// agentRSS reads the agent's resident set. The agent runs under nsenter,
// which execs it in place, so the pid is the agent's.
func agentRSS(t *testing.T, a *agent) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", a.Cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmRSS")
	return 0
}
