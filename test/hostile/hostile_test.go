package hostile

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	"golang.org/x/sys/unix"

	"github.com/sluicemesh/sluice/test/harness/nstest"
)

// row is one attack: it asserts its own refusal; the table then proves the
// agent still serves and the victim is untouched.
type row struct {
	attack string
	run    func(t *testing.T, n *node)
}

func TestHostileCallers(t *testing.T) {
	n := newNode(t)
	n.start(true)
	victim := nstest.NewIn(t, n.Root, "victim")
	if e, _ := n.run(call{verb: "ADD", id: "victim", netns: victim.Path}); e != nil {
		t.Fatalf("victim ADD: %v", e)
	}
	before := ruleset(t, victim)
	if before == "" {
		t.Fatal("victim has no ruleset")
	}
	for _, r := range rows {
		t.Run(strings.ReplaceAll(r.attack, " ", "_"), func(t *testing.T) {
			r.run(t, n)
			n.stillServes(t, victim, before)
		})
	}
}

// refused asserts a CNI error with code and a message holding want.
func refused(t *testing.T, e *types.Error, code uint, want string) {
	t.Helper()
	if e == nil || e.Code != code || !strings.Contains(e.Msg+" "+e.Details, want) {
		t.Fatalf("got %v (code %v), want code %d saying %q", e, codeOf(e), code, want)
	}
}

func codeOf(e *types.Error) any {
	if e == nil {
		return "none"
	}
	return e.Code
}

// outsideNetns makes a netns outside the agent's root, and checks at the
// end of the test that it never got a table.
func outsideNetns(t *testing.T, n *node) *nstest.NS {
	dir := filepath.Join(n.Dir, "outside")
	os.MkdirAll(dir, 0o755)
	out := nstest.NewIn(t, dir, fmt.Sprintf("o%d", time.Now().UnixNano()))
	t.Cleanup(func() {
		if ruleset(t, out) != "" {
			t.Errorf("a netns outside the root got a table")
		}
	})
	return out
}

var rows = []row{
	{"netns path is a FIFO", func(t *testing.T, n *node) {
		// Twice --max-inflight of them at once: before the fix each held a
		// slot for ever and every later ADD got "try again later".
		var wg sync.WaitGroup
		for i := range 8 {
			p := filepath.Join(n.Root, fmt.Sprintf("fifo%d", i))
			if err := unix.Mkfifo(p, 0o600); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				if fd, err := unix.Open(p, unix.O_WRONLY|unix.O_NONBLOCK, 0); err == nil {
					unix.Close(fd)
				}
				os.Remove(p)
			})
			wg.Add(1)
			go func() {
				defer wg.Done()
				e, took := n.run(call{verb: "ADD", id: fmt.Sprintf("fifo%d", i), netns: p})
				if e == nil || e.Code != types.ErrInvalidEnvironmentVariables || !strings.Contains(e.Msg, "not a namespace") || took > 2*time.Second {
					t.Errorf("ADD into a FIFO: %v in %v", e, took)
				}
			}()
		}
		wg.Wait()
	}},
	{"absolute symlink out of the root", func(t *testing.T, n *node) {
		out := outsideNetns(t, n)
		link := filepath.Join(n.Root, "abs-escape")
		os.Symlink(out.Path, link)
		e, _ := n.run(call{verb: "ADD", id: "abs-escape", netns: link})
		refused(t, e, types.ErrInvalidEnvironmentVariables, "outside the netns root")
	}},
	{"relative symlink out of the root", func(t *testing.T, n *node) {
		out := outsideNetns(t, n)
		link := filepath.Join(n.Root, "rel-escape")
		os.Symlink(filepath.Join("..", "outside", out.Name), link)
		e, _ := n.run(call{verb: "ADD", id: "rel-escape", netns: link})
		refused(t, e, types.ErrInvalidEnvironmentVariables, "outside the netns root")
	}},
	{"the agent's own netns under the root", func(t *testing.T, n *node) {
		target := filepath.Join(n.Root, "hostns")
		os.WriteFile(target, nil, 0o444)
		if err := unix.Mount(n.NS.Path, target, "", unix.MS_BIND, ""); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unix.Unmount(target, unix.MNT_DETACH); os.Remove(target) })
		e, _ := n.run(call{verb: "ADD", id: "hostns", netns: target})
		refused(t, e, types.ErrInvalidEnvironmentVariables, "agent's own")
		if ruleset(t, n.NS) != "" {
			t.Fatal("the agent's own netns got a table")
		}
	}},
	{"a /proc path when /proc is not a root", func(t *testing.T, n *node) {
		e, _ := n.run(call{verb: "ADD", id: "proc", netns: "/proc/1/ns/net"})
		refused(t, e, types.ErrInvalidEnvironmentVariables, "/proc is not among the netns roots")
	}},
	{"a 250-byte container id", func(t *testing.T, n *node) {
		pod := nstest.NewIn(t, n.Root, "longid")
		e, _ := n.run(call{verb: "ADD", id: strings.Repeat("a", 250), netns: pod.Path})
		refused(t, e, types.ErrInvalidEnvironmentVariables, "longer than 226")
	}},
	{"an oversize prevResult", func(t *testing.T, n *node) {
		var ips []map[string]any
		for i := range 60000 {
			ips = append(ips, map[string]any{"address": fmt.Sprintf("10.%d.%d.%d/32", i>>16, (i>>8)&255, i&255)})
		}
		pod := nstest.NewIn(t, n.Root, "big")
		e, _ := n.run(call{verb: "ADD", id: "big", netns: pod.Path,
			conf: map[string]any{"prevResult": map[string]any{"cniVersion": "1.0.0", "ips": ips}}})
		refused(t, e, types.ErrInvalidNetworkConfig, "too large")
	}},
	{"eight thousand unknown config keys", func(t *testing.T, n *node) {
		conf := map[string]any{}
		for i := range 8000 {
			conf[fmt.Sprintf("junk%05d", i)] = true
		}
		pod := nstest.NewIn(t, n.Root, "noisy")
		lines := n.agent.Logs.Count("plugin warning")
		if e, _ := n.run(call{verb: "ADD", id: "noisy", netns: pod.Path, conf: conf}); e != nil {
			t.Fatalf("ADD with unknown keys: %v", e)
		}
		if got := n.agent.Logs.Count("plugin warning") - lines; got > 9 {
			t.Fatalf("%d warning lines for one call", got)
		}
	}},
	{"DEL of an unknown attachment naming the victim's netns", func(t *testing.T, n *node) {
		if e, _ := n.run(call{verb: "DEL", id: "stranger", netns: filepath.Join(n.Root, "victim")}); e != nil {
			t.Fatalf("DEL: %v", e)
		}
	}},
	{"DEL of the victim's container on another interface", func(t *testing.T, n *node) {
		if e, _ := n.run(call{verb: "DEL", id: "victim", ifName: "net1", netns: filepath.Join(n.Root, "victim")}); e != nil {
			t.Fatalf("DEL: %v", e)
		}
	}},
	{"GC without valid attachments", func(t *testing.T, n *node) {
		e, _ := n.run(call{verb: "GC", id: "gc", conf: map[string]any{"cniVersion": "1.1.0"}})
		if e == nil {
			t.Fatal("GC without cni.dev/valid-attachments succeeded")
		}
	}},
	{"GC from another network", func(t *testing.T, n *node) {
		e, _ := n.run(call{verb: "GC", id: "gc", conf: map[string]any{"cniVersion": "1.1.0", "name": "other-net",
			"cni.dev/valid-attachments": []map[string]string{}}})
		if e != nil {
			t.Fatalf("GC of another network: %v", e)
		}
	}},
	{"a pod of an excluded namespace reaching the agent", func(t *testing.T, n *node) {
		pod := nstest.NewIn(t, n.Root, "excluded")
		if e, _ := n.run(call{verb: "ADD", id: "excluded", netns: pod.Path, podNS: "excluded"}); e != nil {
			t.Fatalf("ADD: %v", e)
		}
		if ruleset(t, pod) != "" {
			t.Fatal("a pod of an excluded namespace was captured")
		}
	}},
	{"a uid the agent does not allow, with the socket mode loosened", attackAsNobody},
	{"a flood of the health port", floodHealthPort},
	{"a local user holding the kubelet's address's health connections", silenceProbesAsNobody},
	{"an agent configured to serve no uid", agentServingNoUID},
}
