package nri_test

import (
	"os"
	"strconv"
	"testing"
	"time"

	sluicev1 "github.com/sluicemesh/sluice/api/sluice/v1"
	"github.com/sluicemesh/sluice/test/harness/nstest"
)

// An agent that connects after a pod started enrols it from Synchronize;
// after a containerd restart (no Stop or Remove arrives for what the
// runtime lost) the plugin reconnects by itself and Synchronize releases
// the record of a sandbox the runtime does not list.
func TestNRISynchronize(t *testing.T) {
	n := newNode(t)
	c := n.startContainerd(containerdOptions{})
	early := c.runPod("shop", "early") // no agent yet: starts uncaptured
	a := n.startAgent()
	if n.enrolled(early.ID) == nil {
		t.Fatalf("the pod started before the agent was not enrolled by Synchronize:\n%s", a.Logs)
	}
	expectCaptured(t, n.netns(early))

	// A record whose sandbox the runtime does not know: what a pod removed
	// across a runtime restart leaves behind.
	ghostNetns := n.holdNetns()
	if _, err := n.cniAdd("ghost0001", ghostNetns); err != nil {
		t.Fatalf("CNI ADD of the ghost: %v", err)
	}
	if n.enrolled("ghost0001") == nil {
		t.Fatal("the ghost attachment was not enrolled")
	}

	c.Stop()
	c.Run()
	nstest.Eventually(t, 30*time.Second, func() bool {
		return a.Logs.Count("synchronized with the runtime") >= 2
	}, "the agent did not reconnect after containerd restarted:\n%s", a.Logs)
	if a.Logs.Count("released a sandbox the runtime no longer has", "attachment=ghost0001/eth0") != 1 {
		t.Fatalf("Synchronize did not release the ghost:\n%s", a.Logs)
	}
	if n.enrolled("ghost0001") != nil {
		t.Fatalf("Synchronize kept the record of a sandbox the runtime does not list:\n%s", a.Logs)
	}
	if n.enrolled(early.ID) == nil {
		t.Fatalf("Synchronize released a live pod:\n%s", a.Logs)
	}
	expectCaptured(t, n.netns(early))
}

// holdNetns starts a process in a new netns in the node and returns the
// netns path; the process is killed with the node.
func (n *node) holdNetns() string {
	pid := n.holdProcess("sleep", "unshare", "--net", "sleep", "600")
	if nsOf(pid, "net") == nsOf(n.HolderPID(), "net") {
		n.t.Fatal("unshare --net kept the node's netns")
	}
	return "/proc/" + strconv.Itoa(pid) + "/ns/net"
}

func nsOf(pid int, kind string) string {
	s, _ := os.Readlink("/proc/" + strconv.Itoa(pid) + "/ns/" + kind)
	return s
}

// cniAdd calls the agent's CNI ADD over its socket, as the plugin would,
// for a pod shop/<containerID>.
func (n *node) cniAdd(containerID, netns string) (*sluicev1.AddResponse, error) {
	return n.cniAddPod(containerID, netns, &sluicev1.PodRef{Namespace: "shop", Name: containerID, Uid: "uid-" + containerID})
}

// ips are prevResult's addresses, as the chain before sluice would pass them.
func (n *node) cniAddPod(containerID, netns string, pod *sluicev1.PodRef, ips ...string) (*sluicev1.AddResponse, error) {
	n.t.Helper()
	return sluicev1.NewCNIClient(n.Client()).Add(n.t.Context(), &sluicev1.AddRequest{
		ApiVersion: sluicev1.ApiVersion_API_VERSION_2, ContainerId: containerID, Netns: netns, IfName: "eth0",
		Pod:    pod,
		Config: &sluicev1.PluginConfig{NetworkName: "pods"},
		Ips:    ipConfigs(ips),
	})
}

func ipConfigs(ips []string) []*sluicev1.IPConfig {
	var out []*sluicev1.IPConfig
	for _, ip := range ips {
		out = append(out, &sluicev1.IPConfig{Address: ip, Interface: "eth0"})
	}
	return out
}
