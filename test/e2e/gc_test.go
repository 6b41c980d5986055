package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"

	sluicev1 "github.com/sluicemesh/sluice/api/sluice/v1"
	"github.com/sluicemesh/sluice/test/harness/nstest"
)

// CNI 1.1 GC through libcni removes every attachment the runtime no longer
// lists — including one only the agent knows (its ADD reached the agent but
// the runtime lost it) — and never a listed one.
func TestGCKeepsOnlyValidAttachments(t *testing.T) {
	n := newNode(t)
	n.startAgent()
	c := n.cni(n.loopbackChain("2s"))
	keep, drop, orphan := n.Pod("keep"), n.Pod("drop"), n.Pod("orphan")
	for _, rc := range []*libcni.RuntimeConf{rt("keep", keep), rt("drop", drop)} {
		if _, err := c.Add(rc); err != nil {
			t.Fatalf("ADD %s: %v", rc.ContainerID, err)
		}
	}
	if _, err := sluicev1.NewCNIClient(n.Client()).Add(t.Context(), &sluicev1.AddRequest{
		ApiVersion: sluicev1.ApiVersion_API_VERSION_1, ContainerId: "orphan", Netns: orphan.Path, IfName: "eth0",
		Config: &sluicev1.PluginConfig{NetworkName: "storm"}}); err != nil {
		t.Fatal(err)
	}
	// Another network's GC lists none of these: it must remove none of them.
	other := n.cni([]byte(strings.Replace(string(n.loopbackChain("2s")), `"name":"storm"`, `"name":"other-net"`, 1)))
	if err := n.NS.Do(func() error {
		return other.Lib.GCNetworkList(context.Background(), other.Conf, &libcni.GCArgs{ValidAttachments: []types.GCAttachment{}})
	}); err != nil {
		t.Fatalf("GC of other-net: %v", err)
	}
	// A GC whose config lacks cni.dev/valid-attachments is refused (by hand:
	// libcni itself DELs every cached attachment when given no list).
	out, err := execPlugin(t, n.NS, []string{"CNI_COMMAND=GC", "CNI_CONTAINERID=", "CNI_IFNAME=", "CNI_NETNS="},
		[]byte(fmt.Sprintf(`{"cniVersion":"1.1.0","name":"storm","type":"sluice","socket":%q}`, n.Socket)))
	if err == nil {
		t.Error("GC without cni.dev/valid-attachments succeeded")
	} else if e := cniError(t, out); e.Code != types.ErrInvalidNetworkConfig {
		t.Errorf("GC without cni.dev/valid-attachments: %v", e)
	}
	for name, pod := range map[string]*nstest.NS{"keep": keep, "drop": drop, "orphan": orphan} {
		if s := rulesetState(t, pod); s != "full" {
			t.Fatalf("a GC of another network or without the key touched %s: %s", name, s)
		}
	}
	err = n.NS.Do(func() error {
		return c.Lib.GCNetworkList(context.Background(), c.Conf, &libcni.GCArgs{
			ValidAttachments: []types.GCAttachment{{ContainerID: "keep", IfName: "eth0"}}})
	})
	if err != nil {
		t.Fatalf("GC: %v", err)
	}
	if s := rulesetState(t, keep); s != "full" {
		t.Errorf("GC touched a valid attachment: %s", s)
	}
	if s := rulesetState(t, drop); s != "none" {
		t.Errorf("drop: %s", s)
	}
	if s := rulesetState(t, orphan); s != "none" {
		t.Errorf("orphan (known only to the agent): %s", s)
	}
	ws := n.Workloads(t)
	if len(ws) != 1 || ws[0].ContainerId != "keep" {
		t.Errorf("after GC the agent lists %v", ws)
	}
	if len(n.agent.Logs.Lines("msg=call", "/sluice.v1.CNI/GC", "code=OK")) != 2 { // other-net's, then storm's
		t.Errorf("the GC verb never reached the agent:\n%s", n.agent.Logs)
	}
}

// CNI 1.1 STATUS through libcni: by default fine whether or not the agent
// is there (an agent outage must not make the node's network not ready);
// with "status": "agent", fine when the agent is ready and an error naming
// the cause when it is not.
func TestStatusThroughLibcni(t *testing.T) {
	n := newNode(t)
	n.startAgent()
	byDefault := n.cni(n.loopbackChain("2s"))
	asksAgent := n.cni([]byte(fmt.Sprintf(`{"cniVersion":"1.1.0","name":"storm","plugins":[
  {"type":"loopback"},
  {"type":"sluice","socket":%q,"timeout":"2s","status":"agent"}]}`, n.Socket)))
	status := func(c *cni) error {
		return n.NS.Do(func() error { return c.Lib.GetStatusNetworkList(context.Background(), c.Conf) })
	}
	for _, c := range []*cni{byDefault, asksAgent} {
		if err := status(c); err != nil {
			t.Fatalf("STATUS with a ready agent: %v", err)
		}
	}
	n.agent.Stop(t)
	if err := status(byDefault); err != nil {
		t.Errorf("STATUS (default) with no agent = %v, want success", err)
	}
	if err := status(asksAgent); err == nil || !strings.Contains(err.Error(), "not available") {
		t.Errorf("STATUS (status: agent) with no agent = %v, want 'not available'", err)
	}
}
