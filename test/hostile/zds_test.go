package hostile

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicemesh/sluice/test/harness/nstest"
)

// zdsSocket is a ZDS socket path in a directory of the test's own, reachable
// by any uid like the agent socket's base.
func zdsSocket(n *node) string {
	return filepath.Join(filepath.Dir(filepath.Dir(n.Socket)), "ztunnel", "ztunnel.sock")
}

func ambientArgs(zsock string) []string {
	return []string{"--ambient", "--host-netns", "/proc/self/ns/net", "--ztunnel-socket", zsock}
}

// A removed ZDS socket is listened on again within seconds, with no
// restart: a restarted ztunnel can connect and /healthz is green. One
// someone else's socket replaced fails liveness and names the socket, is
// not removed by the agent when it exits, and the restarted agent listens
// again once it is gone. Pods still get captured meanwhile.
func TestZtunnelSocketRemovedOrReplaced(t *testing.T) {
	n := newNode(t)
	zsock := zdsSocket(n)
	a := n.start(true, ambientArgs(zsock)...)
	if code, body := n.get("/healthz"); code != 200 {
		t.Fatalf("/healthz %d %s", code, body)
	}
	if err := os.Remove(zsock); err != nil {
		t.Fatal(err)
	}
	listenedAgain(t, n, zsock)
	c, err := net.DialTimeout("unixpacket", zsock, 2*time.Second)
	if err != nil {
		t.Fatalf("a ztunnel cannot reach the agent once its socket was listened on again: %v", err)
	}
	c.Close()

	replaceSocket(t, "unixpacket", zsock)
	nstest.Eventually(t, 5*time.Second, func() bool {
		code, _ := n.get("/healthz")
		return code == 503
	}, "/healthz stayed green with another's socket at the ZDS path")
	if _, body := n.get("/readyz"); !strings.Contains(body, "ztunnel-socket: socket "+zsock+" is not ours any more") {
		t.Fatalf("/readyz says %q", body)
	}
	n.stillServes(t, nstest.NewIn(t, n.Root, "victim"), "")
	stopLeavesOthersSocket(t, a, zsock)

	// The restart the kubelet makes, once the other socket is gone, listens
	// again: a ztunnel can connect.
	if err := os.Remove(zsock); err != nil {
		t.Fatal(err)
	}
	n.start(true, ambientArgs(zsock)...)
	c, err = net.DialTimeout("unixpacket", zsock, 2*time.Second)
	if err != nil {
		t.Fatalf("a ztunnel cannot reach the restarted agent: %v", err)
	}
	c.Close()
}

// The ZDS socket's directory follows the agent socket's wall: a directory
// others may write to, one another uid owns, or a symlink is refused at
// start (anyone who could write there could put their own socket in its
// place and be handed ztunnel's hello), and left as it was.
func TestSharedZtunnelSocketDirRefused(t *testing.T) {
	for _, c := range []struct {
		name, want string
		make       func(t *testing.T, dir string)
	}{
		{"world-writable dir", "writable by group or others", func(t *testing.T, dir string) {
			mkdirMode(t, dir, os.ModeSticky|0o777)
		}},
		{"another uid's dir", "owned by uid 65534", func(t *testing.T, dir string) {
			mkdirMode(t, dir, 0o755)
			if err := os.Chown(dir, 65534, 65534); err != nil {
				t.Fatal(err)
			}
		}},
		{"symlinked dir", "not a directory", func(t *testing.T, dir string) {
			target := filepath.Join(filepath.Dir(dir), "elsewhere")
			mkdirMode(t, target, 0o755)
			if err := os.Symlink(target, dir); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			n := newNode(t)
			zsock := zdsSocket(n)
			dir := filepath.Dir(zsock)
			c.make(t, dir)
			before, _ := os.Lstat(dir)
			a := n.start(false, ambientArgs(zsock)...)
			select {
			case <-a.Done:
			case <-time.After(10 * time.Second):
				t.Fatalf("the agent started on the %s ZDS socket dir:\n%s", c.name, a.Logs)
			}
			if a.Cmd.ProcessState.Success() || !strings.Contains(a.Logs.String(), c.want) {
				t.Fatalf("agent: %v, want an error saying %q\n%s", a.Cmd.ProcessState, c.want, a.Logs)
			}
			if strings.Contains(a.Logs.String(), "msg=serving") {
				t.Fatal("the agent served")
			}
			after, err := os.Lstat(dir)
			if err != nil || after.Mode() != before.Mode() || after.Sys().(*syscall.Stat_t).Uid != before.Sys().(*syscall.Stat_t).Uid {
				t.Fatalf("the dir changed: %v -> %v (%v)", before.Mode(), after, err)
			}
			if _, err := os.Lstat(zsock); err == nil {
				t.Fatal("a socket was created in the refused dir")
			}
		})
	}
}

func mkdirMode(t *testing.T, dir string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, mode); err != nil {
		t.Fatal(err)
	}
}
