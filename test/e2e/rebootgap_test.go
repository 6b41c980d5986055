package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"

	"github.com/sluicemesh/sluice/test/harness/nstest"
	"github.com/sluicemesh/sluice/test/harness/proctest"
)

// firstConfig loads the config a runtime would use for the next pod: the
// lexically first .conf/.conflist/.json in dir, as containerd and CRI-O
// pick it at every ADD.
func firstConfig(dir string) (string, *libcni.NetworkConfigList, error) {
	files, err := libcni.ConfFiles(dir, []string{".conf", ".conflist", ".json"})
	if err != nil || len(files) == 0 {
		return "", nil, fmt.Errorf("no CNI config in %s (%v)", dir, err)
	}
	sort.Strings(files)
	// Every config this test writes, and every one the installer writes
	// before a primary, is a conflist: a first file of another kind is the
	// test's failure, not a chain to read.
	if filepath.Ext(files[0]) != ".conflist" {
		return filepath.Base(files[0]), nil, fmt.Errorf("the first CNI config %s is not a conflist", files[0])
	}
	list, err := libcni.ConfListFromFile(files[0])
	return filepath.Base(files[0]), list, err
}

func chainHas(list *libcni.NetworkConfigList, typ string) bool {
	for _, p := range list.Plugins {
		if p.Network.Type == typ {
			return true
		}
	}
	return false
}

// runtimeTally counts what pods ADDed through a node's first config got;
// pods are ADDed concurrently, as a runtime starts sandboxes.
type runtimeTally struct {
	mu                           sync.Mutex
	pods, captured, failedClosed int
	uncaptured                   []string // pods whose ADD succeeded with no capture
	away, awayCaptured           int      // pods whose config was picked while the agent was stopped
}

// addPod does what a runtime does for one pod sandbox: pick the first
// config now, ADD through it, and DEL through the same config (the pod is
// torn down at once, or its failed ADD cleaned up). A pod counts as
// uncaptured when its ADD succeeded but its netns holds no sluice table.
func (r *runtimeTally) addPod(t *testing.T, n *node, lib *libcni.CNIConfig, pod *nstest.NS, away bool) {
	file, list, err := firstConfig(n.ConfDir)
	r.mu.Lock()
	r.pods++
	if away {
		r.away++
	}
	r.mu.Unlock()
	if err != nil {
		r.mu.Lock()
		r.failedClosed++
		r.mu.Unlock()
		return
	}
	c := &cni{NS: n.NS, Conf: list, Lib: lib}
	_, addErr := c.Add(rt(pod.Name, pod))
	captured := addErr == nil && pod.Command("nft", "list", "table", "inet", "sluice").Run() == nil
	r.mu.Lock()
	switch {
	case addErr != nil:
		r.failedClosed++
	case !captured:
		r.uncaptured = append(r.uncaptured, fmt.Sprintf("%s (through %s, sluice in the chain: %v)", pod.Name, file, chainHas(list, "sluice")))
	default:
		r.captured++
		if away {
			r.awayCaptured++
		}
	}
	r.mu.Unlock()
	if err := c.Del(rt(pod.Name, pod)); err != nil {
		t.Errorf("DEL %s: %v", pod.Name, err)
	}
}

// TestPrimaryRewrittenWhileAgentAwayFailsClosed is a node's reboot, over
// and over: the real agent, with its installer, is stopped (as on an
// upgrade, keeping its config), the stand-in primary CNI writes its
// conflist afresh from its own template (no sluice) while the agent is
// away, and the agent starts again. Meanwhile a runtime ADDs a pod every
// 250 ms through the first config, with the real plugin through libcni.
// No pod may start uncaptured: while the agent is away an ADD fails
// closed, and once it is back the pod is captured.
func TestPrimaryRewrittenWhileAgentAwayFailsClosed(t *testing.T) {
	n := newNode(t)
	primaryPath := filepath.Join(n.ConfDir, "10-bridge.conflist")
	template := n.bridgeOnly()
	if err := os.WriteFile(primaryPath, template, 0o644); err != nil {
		t.Fatal(err)
	}
	args := n.agentArgs("--install=true", "--uninstall-on-exit=false")
	start := func() *agent {
		return proctest.Start(t, n.NS.Command(filepath.Join(binDir, "sluice-agent"), args...))
	}
	a := start()
	a.Wait(t, 10*time.Second, func() bool {
		resp, err := n.Status()
		return err == nil && resp.Ready
	}, "agent never became ready")

	lib := libcni.NewCNIConfigWithCacheDir([]string{n.CNIBin, binDir}, t.TempDir(), nil)
	var tally runtimeTally
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	pods := 0
	var inflight sync.WaitGroup
	// addFor starts a pod every tick for d, each ADDed in its own goroutine.
	addFor := func(d time.Duration, away bool) {
		for end := time.Now().Add(d); time.Now().Before(end); {
			<-tick.C
			pods++
			pod := n.Pod(fmt.Sprintf("p%d", pods))
			inflight.Go(func() { tally.addPod(t, n, lib, pod, away) })
		}
	}

	const restarts = 8
	var rewritten []byte
	for i := range restarts {
		addFor(time.Second, false)
		a.Stop(t)
		// The primary's CNI starts first and writes its file from its
		// template, by rename, as a CNI's installer does.
		rewritten = []byte(strings.Replace(string(template), `"isGateway": true`,
			fmt.Sprintf(`"isGateway": true, "hairpinMode": %v`, i%2 == 0), 1))
		tmp := filepath.Join(n.ConfDir, ".primary.tmp")
		if err := os.WriteFile(tmp, rewritten, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, primaryPath); err != nil {
			t.Fatal(err)
		}
		addFor(time.Second, true)
		a = start() // pods keep coming while it starts
	}
	addFor(2*time.Second, false)
	inflight.Wait()
	a.Wait(t, 10*time.Second, func() bool {
		resp, err := n.Status()
		return err == nil && resp.Ready
	}, "agent not ready after the last restart")
	t.Logf("%d pods through %d agent restarts with the primary rewritten while away: %d captured, %d failed closed, %d uncaptured; of the %d ADDed while the agent was stopped, %d waited and were captured",
		tally.pods, restarts, tally.captured, tally.failedClosed, len(tally.uncaptured), tally.away, tally.awayCaptured)
	if len(tally.uncaptured) > 0 {
		t.Errorf("%d of %d pods started uncaptured, the first: %s", len(tally.uncaptured), tally.pods, strings.Join(tally.uncaptured[:min(5, len(tally.uncaptured))], "; "))
	}
	if tally.captured == 0 {
		t.Error("no pod was captured: the runtime never ran a chain with a ready agent")
	}

	// The config the runtime reads follows the last rewrite, with sluice.
	nstest.Eventually(t, 5*time.Second, func() bool {
		_, list, err := firstConfig(n.ConfDir)
		b, _ := os.ReadFile(primaryPath)
		return err == nil && chainHas(list, "sluice") && strings.Contains(string(list.Bytes), `"hairpinMode": false`) &&
			string(b) == string(rewritten)
	}, "the first config does not follow the primary's last rewrite with sluice, or the primary was edited")
}
