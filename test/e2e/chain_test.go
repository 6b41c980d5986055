package e2e

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"
	current "github.com/containernetworking/cni/pkg/types/100"
)

// The whole core path: runtime (libcni) → bridge + host-local → sluice →
// agent → nftables in the pod netns → a real connection lands on the proxy.
func TestChainAddCaptureCheckDel(t *testing.T) {
	n := newNode(t)
	n.startAgent()
	c := n.cni(n.conflist("1.1.0", ""))
	pod := n.Pod("pod-a")
	rc := rt("c0ffee01", pod)

	res, err := c.Add(rc)
	if err != nil {
		t.Fatalf("ADD: %v", err)
	}
	r, err := current.NewResultFromResult(res)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.IPs) != 2 || !strings.HasPrefix(r.IPs[0].Address.String(), "10.244.0.") {
		t.Fatalf("ADD result lost the bridge's IPs: %+v", r)
	}
	if out := pod.Run(t, "nft", "list", "table", "inet", "sluice"); !strings.Contains(out, "15001") {
		t.Fatalf("pod netns has no sluice table:\n%s", out)
	}

	p := startProxy(t, pod, "15001")
	if _, err := dialFrom(t, pod, "10.96.0.10:80"); err != nil {
		t.Fatalf("outbound from pod: %v", err)
	}
	p.expect(t, "10.96.0.10:80")
	if _, err := dialFrom(t, pod, "[fd00:96::10]:80"); err != nil {
		t.Fatalf("outbound v6 from pod: %v", err)
	}
	p.expect(t, "[fd00:96::10]:80")

	if err := c.Check(rc); err != nil {
		t.Fatalf("CHECK on a fresh pod: %v", err)
	}
	pod.Run(t, "nft", "flush", "table", "inet", "sluice")
	if err := c.Check(rc); err == nil || !strings.Contains(err.Error(), "drift") {
		t.Fatalf("CHECK after flush = %v, want drift", err)
	}

	if err := c.Del(rc); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	if err := c.Del(rc); err != nil {
		t.Fatalf("second DEL: %v", err)
	}
	if out, err := pod.Command("nft", "list", "table", "inet", "sluice").CombinedOutput(); err == nil {
		t.Fatalf("table still there after DEL:\n%s", out)
	}
	if recs := n.Workloads(t); len(recs) != 0 {
		t.Fatalf("agent still lists %d workloads after DEL", len(recs))
	}
}

// sluice passes the previous result through byte for byte in meaning: the
// runtime must see exactly what the primary CNI returned.
func TestAddResultEqualsBridgeResult(t *testing.T) {
	n := newNode(t)
	n.startAgent()
	for _, ver := range []string{"0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"} {
		t.Run(ver, func(t *testing.T) {
			list := n.conflist(ver, "")
			conf, err := libcni.ConfListFromBytes(list)
			if err != nil {
				t.Fatal(err)
			}
			bridgeOnly := &libcni.NetworkConfigList{Name: conf.Name, CNIVersion: conf.CNIVersion, Plugins: conf.Plugins[:1]}
			c := n.cni(list)
			pod := n.Pod("pod-" + strings.ReplaceAll(ver, ".", ""))
			rc := rt("bridge-"+strings.ReplaceAll(ver, ".", ""), pod)
			var bridgeRes []byte
			err = n.NS.Do(func() error {
				res, err := c.Lib.AddNetworkList(t.Context(), bridgeOnly, rc)
				if err != nil {
					return err
				}
				bridgeRes, err = json.Marshal(res)
				return err
			})
			if err != nil {
				t.Fatalf("bridge ADD: %v", err)
			}
			stdin := []byte(`{"cniVersion":"` + ver + `","name":"e2e","type":"sluice","socket":"` + n.Socket + `","prevResult":` + string(bridgeRes) + `}`)
			out, err := execPlugin(t, n.NS, []string{"CNI_COMMAND=ADD", "CNI_CONTAINERID=" + rc.ContainerID, "CNI_NETNS=" + pod.Path, "CNI_IFNAME=eth0"}, stdin)
			if err != nil {
				t.Fatalf("sluice ADD: %v\n%s", err, out)
			}
			if !jsonEqual(t, out, bridgeRes) {
				t.Fatalf("sluice changed the result:\n got %s\nwant %s", out, bridgeRes)
			}
		})
	}
}

func jsonEqual(t *testing.T, a, b []byte) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatalf("%s: %v", a, err)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return string(xa) == string(ya)
}
