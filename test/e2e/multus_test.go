package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	current "github.com/containernetworking/cni/pkg/types/100"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"

	sluicev1 "github.com/sluicemesh/sluice/api/sluice/v1"
	"github.com/sluicemesh/sluice/test/harness/kubetest"
	"github.com/sluicemesh/sluice/test/harness/nstest"
	"github.com/sluicemesh/sluice/test/harness/podtest"
)

// nadName is the NetworkAttachmentDefinition Istio's injector names in
// every pod when pilot.cni.provider=multus (default/istio-cni).
const nadName = "istio-cni"

// Multus's thin plugin runs sluice as a network of its own: the pod names
// the NAD default/istio-cni, which has no config, so Multus runs the
// conflist in its conf dir whose network is called istio-cni: the agent's
// non-chained YYY-sluice.conflist. sluice gets no prevResult and a net1
// interface name, the agent captures the pod, real TCP lands on the proxy,
// and DEL through Multus releases it; a pod without a sidecar that names
// the NAD reaches the agent and starts uncaptured. Before the agent has
// written its file, and while it is down, Multus refuses the pod and tears
// the primary down.
func TestMultusNADRunsSluice(t *testing.T) {
	env, c := sharedKube(t)
	multusBin := multusBinary(t)
	createNAD(t, env, "default", nadName)
	createNamespace(t, c, "multus")
	n := newNode(t)
	forwardAPIServer(t, n, env)
	multus := n.multusRuntime(t, env, multusBin)

	pod := podtest.Create(t, c, "multus", sidecarPod("app", map[string]string{
		"k8s.v1.cni.cncf.io/networks": "default/" + nadName,
	}))
	netns := n.Pod("app")
	rc := rtFor("mul1", netns, pod)

	// No agent yet, so no file in Multus's conf dir names the network: the
	// pod must not start.
	if _, err := multus.Add(rc); err == nil || !strings.Contains(err.Error(), n.ConfDir) {
		t.Fatalf("ADD before the agent wrote its conflist = %v, want an error naming %s", err, n.ConfDir)
	}
	expectNoPrimary(t, netns)

	n.kubeAgent(env, "--install=true", "--chained=false", "--cni-network-name="+nadName)
	own := filepath.Join(n.ConfDir, "YYY-sluice.conflist")
	if list, err := libcni.ConfListFromFile(own); err != nil || list.Name != nadName {
		t.Fatalf("agent's own conflist %s: %v, network %q, want %q", own, err, list.Name, nadName)
	}

	start := time.Now()
	res, err := multus.Add(rc)
	if err != nil {
		t.Fatalf("ADD through Multus: %v\nmultus log:\n%s", err, multus.log())
	}
	t.Logf("ADD through Multus (primary, then sluice) took %v", time.Since(start))
	r, err := current.NewResultFromResult(res)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.IPs) == 0 || !strings.HasPrefix(r.IPs[0].Address.String(), "10.244.0.") {
		t.Fatalf("Multus's result is not the primary's: %+v", r)
	}
	recs := n.Workloads(t)
	// Multus names the interface of a pod's first extra network net1, and
	// gives that network no prevResult: the agent reads the addresses the
	// primary gave from the pod's netns, as istio-iptables does.
	if len(recs) != 1 || recs[0].ContainerId != "mul1" || recs[0].IfName != "net1" || !hasAddress(recs[0].Ips, r.IPs[0].Address.String()) {
		t.Fatalf("agent records %v, want one for mul1 on net1 with the primary's %s, read from the netns", recs, r.IPs[0].Address.String())
	}
	n.expectInSync(t, "mul1")
	p := startProxy(t, netns, "15001")
	if _, err := dialFrom(t, netns, "10.96.0.10:80"); err != nil {
		t.Fatalf("outbound from the pod: %v", err)
	}
	p.expect(t, "10.96.0.10:80")

	if err := multus.Del(rc); err != nil {
		t.Fatalf("DEL through Multus: %v\nmultus log:\n%s", err, multus.log())
	}
	if s := rulesetState(t, netns); s != "none" {
		t.Fatalf("pod ruleset after DEL through Multus: %s", s)
	}
	if recs := n.Workloads(t); len(recs) != 0 {
		t.Fatalf("agent still lists %v after DEL", recs)
	}
	expectNoPrimary(t, netns)

	// A pod that names the NAD but has no sidecar starts uncaptured.
	plain := podtest.Create(t, c, "multus", &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "plain", Annotations: map[string]string{"k8s.v1.cni.cncf.io/networks": "default/" + nadName}},
		Spec:       corev1.PodSpec{NodeName: kubeNode, Containers: []corev1.Container{{Name: "app", Image: "app"}}},
	})
	plainNS := n.Pod("plain")
	if _, err := multus.Add(rtFor("plain1", plainNS, plain)); err != nil {
		t.Fatalf("ADD of an uninjected pod through Multus: %v", err)
	}
	if got := n.agent.Logs.Lines("/sluice.v1.CNI/Add", "container_id=plain1", "code=OK"); len(got) != 1 {
		t.Fatalf("agent answered %d ADDs for the uninjected pod, want 1 (Multus must call sluice)", len(got))
	}
	if s := rulesetState(t, plainNS); s != "none" {
		t.Fatalf("uninjected pod was captured: %s", s)
	}
	if err := multus.Del(rtFor("plain1", plainNS, plain)); err != nil {
		t.Fatal(err)
	}

	// The agent goes away (its file stays: an upgrade): fail closed.
	n.agent.Cmd.Process.Kill()
	<-n.agent.Done
	_, err = multus.Add(rtFor("mul2", netns, pod))
	if err == nil || !strings.Contains(err.Error(), n.Socket) {
		t.Fatalf("ADD with the agent down = %v, want an error naming its socket", err)
	}
	if s := rulesetState(t, netns); s != "none" {
		t.Fatalf("pod ruleset after a refused ADD: %s", s)
	}
	expectNoPrimary(t, netns)
}

// multusBinary is Multus's thin plugin, built once into the cache by
// hack/multus/build.sh (which pins the version) and found there after.
func multusBinary(t *testing.T) string {
	t.Helper()
	var stderr strings.Builder
	cmd := exec.Command("../../hack/multus/build.sh")
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("hack/multus/build.sh: %v\n%s", err, stderr.String())
	}
	return strings.TrimSpace(string(out))
}

var nadGVR = schema.GroupVersionResource{Group: "k8s.cni.cncf.io", Version: "v1", Resource: "network-attachment-definitions"}

// createNAD installs the NAD CRD (once per API server) and a NAD with no
// config, as the chart's provider=multus renders it.
func createNAD(t *testing.T, env *kubetest.Env, ns, name string) {
	t.Helper()
	dyn := dynamic.NewForConfigOrDie(env.AdminConfig())
	ctx := context.Background()
	applyNADCRD(t, dyn)
	nad := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
		"metadata": map[string]any{"name": name, "namespace": ns},
		"spec":     map[string]any{},
	}}
	if _, err := dyn.Resource(nadGVR).Namespace(ns).Create(ctx, nad, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create NAD %s/%s: %v", ns, name, err)
	}
	t.Cleanup(func() { dyn.Resource(nadGVR).Namespace(ns).Delete(ctx, name, metav1.DeleteOptions{}) })
}

func applyNADCRD(t *testing.T, dyn dynamic.Interface) {
	t.Helper()
	f, err := os.Open("../testdata/network-attachment-definition-crd.yaml")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	crd := &unstructured.Unstructured{}
	if err := yaml.NewYAMLOrJSONDecoder(f, 4096).Decode(&crd.Object); err != nil {
		t.Fatalf("decode the NAD CRD: %v", err)
	}
	crds := dyn.Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"})
	if _, err := crds.Create(context.Background(), crd, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create the NAD CRD: %v", err)
	}
	// The API server serves the new kind once it reports it Established.
	nstest.Eventually(t, 10*time.Second, func() bool {
		_, err := dyn.Resource(nadGVR).Namespace("default").List(context.Background(), metav1.ListOptions{})
		return err == nil
	}, "NetworkAttachmentDefinitions never served")
}

// forwardAPIServer makes the test API server reachable from inside the
// node netns at the address the kubeconfigs name (127.0.0.1:port), as it
// is on a real node: Multus runs there and reads pods and NADs.
func forwardAPIServer(t *testing.T, n *node, env *kubetest.Env) {
	t.Helper()
	u, err := url.Parse(env.Host())
	if err != nil {
		t.Fatal(err)
	}
	var ln net.Listener
	if err := n.NS.Do(func() error {
		var err error
		ln, err = net.Listen("tcp", u.Host)
		return err
	}); err != nil {
		t.Fatalf("listen in the node netns: %v", err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go pipe(c, u.Host)
		}
	}()
}

// pipe copies between c and a fresh connection to addr (dialled from the
// machine's netns) until either side is done.
func pipe(c net.Conn, addr string) {
	defer c.Close()
	up, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return
	}
	defer up.Close()
	done := make(chan struct{}, 2)
	go func() { io.Copy(up, c); done <- struct{}{} }()
	go func() { io.Copy(c, up); done <- struct{}{} }()
	<-done
}

// multusRuntime is a container runtime whose only network is Multus (its
// 00-multus.conf), with the bridge conflist as the cluster network.
type multusRuntime struct {
	*cni
	logFile string
}

func (n *node) multusRuntime(t *testing.T, env *kubetest.Env, multusBin string) *multusRuntime {
	t.Helper()
	dir := t.TempDir()
	var primary map[string]any
	if err := json.Unmarshal(n.bridgeOnly(), &primary); err != nil {
		t.Fatal(err)
	}
	conf := map[string]any{
		"cniVersion": "1.0.0",
		"name":       "multus-cni-network",
		"type":       "multus",
		"kubeconfig": env.Kubeconfig(t, kubetest.Admin),
		// Where Multus looks for a network a NAD names without config
		// (its default, /etc/cni/multus/net.d, on a real node): the
		// agent's --cni-conf-dir.
		"confDir": n.ConfDir,
		// Multus's cache (default /var/lib/cni/multus) and the plugin dir
		// it searches first (default /opt/cni/bin): never the machine's.
		"cniDir":      filepath.Join(dir, "cache"),
		"binDir":      n.CNIBin,
		"logFile":     filepath.Join(dir, "multus.log"),
		"logLevel":    "verbose",
		"logToStderr": false,
		"delegates":   []any{primary},
	}
	b, err := json.Marshal(map[string]any{"cniVersion": "1.0.0", "name": "multus-cni-network", "plugins": []any{conf}})
	if err != nil {
		t.Fatal(err)
	}
	c := n.cni(b)
	c.Lib = libcni.NewCNIConfigWithCacheDir([]string{filepath.Dir(multusBin), n.CNIBin, binDir}, filepath.Join(dir, "libcni"), nil)
	return &multusRuntime{cni: c, logFile: conf["logFile"].(string)}
}

func (m *multusRuntime) log() string {
	b, err := os.ReadFile(m.logFile)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	return string(b)
}

// expectNoPrimary checks that the pod netns holds no interface of the
// primary network (eth0), i.e. a refused ADD was rolled back or a DEL ran.
func expectNoPrimary(t *testing.T, pod *nstest.NS) {
	t.Helper()
	err := pod.Do(func() error {
		_, err := net.InterfaceByName("eth0")
		return err
	})
	if err == nil {
		t.Fatalf("%s still has eth0 of the primary network", pod.Name)
	}
}

func hasAddress(ips []*sluicev1.IPConfig, want string) bool {
	for _, ip := range ips {
		if ip.GetAddress() == want {
			return true
		}
	}
	return false
}
