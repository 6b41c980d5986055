package nri_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/sluicemesh/sluice/test/harness/nstest"
	"github.com/sluicemesh/sluice/test/harness/proctest"
)

// A pod netns owned by a user namespace other than the initial one (what
// Kubernetes' hostUsers: false gives a pod) is captured: the agent programs
// it over netlink from outside, with nothing exec'd inside the pod's
// namespaces (where an nft binary would be refused).
func TestUserNamespaceNetnsCaptured(t *testing.T) {
	n := newNode(t)
	n.startContainerd(containerdOptions{})
	n.startAgent()
	pid := n.holdProcess("sleep", "unshare", "--user", "--map-root-user", "--net", "sleep", "600")
	if nsOf(pid, "user") == nsOf(os.Getpid(), "user") {
		t.Fatal("unshare --user kept the initial user namespace")
	}
	netns := "/proc/" + strconv.Itoa(pid) + "/ns/net"
	if _, err := n.cniAdd("userns0001", netns); err != nil {
		t.Fatalf("enrol a netns owned by a child user namespace: %v", err)
	}
	pod := &nstest.NS{Name: "userns", Path: netns}
	// The pod's interface, as a CNI would give it: an address and a
	// default route, so a connect reaches the nat hook at all.
	if err := pod.Do(func() error {
		lo, err := netlink.LinkByName("lo")
		if err != nil {
			return err
		}
		if err := netlink.LinkSetUp(lo); err != nil {
			return err
		}
		eth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "eth0"}, PeerName: "peer0"}
		if err := netlink.LinkAdd(eth); err != nil {
			return err
		}
		addr, _ := netlink.ParseAddr("10.1.0.2/24")
		if err := netlink.AddrAdd(eth, addr); err != nil {
			return err
		}
		for _, name := range []string{"eth0", "peer0"} {
			l, err := netlink.LinkByName(name)
			if err != nil {
				return err
			}
			if err := netlink.LinkSetUp(l); err != nil {
				return err
			}
		}
		_, all, _ := net.ParseCIDR("0.0.0.0/0")
		return netlink.RouteAdd(&netlink.Route{LinkIndex: eth.Attrs().Index, Dst: all, Scope: netlink.SCOPE_LINK})
	}); err != nil {
		t.Fatalf("give the user-namespaced netns an interface: %v", err)
	}
	expectCaptured(t, pod)
}

// With containerd 2.x a pod sandbox with its own user namespace
// (CRI userns_options, mode POD) is captured over NRI. Skips with the
// runtime's own error where this machine's runtime cannot make such a pod.
func TestNRIUserNamespacePod(t *testing.T) {
	n := newNode(t)
	c := n.startContainerd(containerdOptions{})
	n.startAgent()
	conf := filepath.Join(n.Dir, "userns-pod.json")
	if err := os.WriteFile(conf, []byte(`{
  "metadata": {"name": "nohost", "namespace": "shop", "uid": "uid-shop-nohost", "attempt": 0},
  "hostname": "nohost",
  "linux": {"cgroup_parent": "`+n.Cgroup+`", "security_context": {"namespace_options": {"network": 0,
    "userns_options": {"mode": 0,
      "uids": [{"host_id": 1000000, "container_id": 0, "length": 65536}],
      "gids": [{"host_id": 1000000, "container_id": 0, "length": 65536}]}}}}
}`), 0o644); err != nil {
		t.Fatal(err)
	}
	id, err := c.Crictl(t.Context(), "runp", conf)
	if err != nil {
		if strings.Contains(err.Error(), "sluice: ") {
			t.Fatalf("the agent refused a user-namespaced pod: %v", err)
		}
		t.Skipf("this machine's runtime cannot run a user-namespaced sandbox (not sluice's refusal): %v", err)
	}
	s := c.Inspect(id)
	if w := n.enrolled(s.ID); w == nil {
		t.Fatalf("user-namespaced sandbox %s not enrolled", s.ID)
	}
	expectCaptured(t, n.netns(s))
}

// holdProcess runs argv in the node until the test ends and returns its
// pid once it runs comm (nsenter and unshare exec the next, they do not
// fork, so the pid stays the same).
func (n *node) holdProcess(comm string, argv ...string) int {
	cmd := proctest.Start(n.t, n.Command(context.Background(), argv...)).Cmd
	nstest.Eventually(n.t, 5*time.Second, func() bool {
		b, _ := os.ReadFile("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/comm")
		return strings.TrimSpace(string(b)) == comm
	}, "%v never got to exec %s", argv, comm)
	return cmd.Process.Pid
}
