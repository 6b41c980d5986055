package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/containernetworking/cni/libcni"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	sluicev1 "github.com/sluicemesh/sluice/api/sluice/v1"
	"github.com/sluicemesh/sluice/test/harness/kubetest"
)

const (
	benchNode      = "bench-node"
	benchNamespace = "bench"
)

// cluster is a real etcd and kube-apiserver (test/harness/kubetest) holding
// the pods the Kubernetes-mode rows ADD: sluice-agent watches them through
// its informers, istio-cni GETs them per ADD, as each does on a node.
type cluster struct {
	env        *kubetest.Env
	stop       func()
	client     kubernetes.Interface
	kubeconfig string
}

func startCluster(dir string) (*cluster, error) {
	env, stop, err := kubetest.StartMain()
	if err != nil {
		return nil, fmt.Errorf("kube-apiserver: %w", err)
	}
	c := &cluster{env: env, stop: stop, kubeconfig: filepath.Join(dir, "kubeconfig")}
	cfg := env.AdminConfig()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		stop()
		return nil, err
	}
	if err := c.writeKubeconfig(c.kubeconfig, cfg.Host); err != nil {
		stop()
		return nil, err
	}
	if c.client, err = kubernetes.NewForConfig(cfg); err != nil {
		stop()
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: benchNamespace}}
	if _, err := c.client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		stop()
		return nil, fmt.Errorf("create namespace: %w", err)
	}
	return c, nil
}

// writeKubeconfig writes an admin kubeconfig for the API server at host.
func (c *cluster) writeKubeconfig(path, host string) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["bench"] = &clientcmdapi.Cluster{Server: host, InsecureSkipTLSVerify: true}
	kc.AuthInfos["bench"] = &clientcmdapi.AuthInfo{Token: c.env.AdminConfig().BearerToken}
	kc.Contexts["bench"] = &clientcmdapi.Context{Cluster: "bench", AuthInfo: "bench"}
	kc.CurrentContext = "bench"
	return clientcmd.WriteToFile(*kc, path)
}

// podRef is what the runtime passes in CNI_ARGS.
type podRef struct{ namespace, name, uid string }

// sidecarPod creates an injected sidecar pod bound to the bench node, as
// the injector leaves it: both sluice and istio-cni capture it.
func (c *cluster) sidecarPod(name string) (podRef, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: benchNamespace,
			Annotations: map[string]string{"sidecar.istio.io/status": `{"containers":["istio-proxy"]}`}},
		Spec: corev1.PodSpec{NodeName: benchNode, Containers: []corev1.Container{
			{Name: "app", Image: "app"},
			{Name: "istio-proxy", Image: "proxyv2", Args: []string{"proxy", "sidecar"}},
		}},
	}
	got, err := c.client.CoreV1().Pods(benchNamespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		return podRef{}, fmt.Errorf("create pod %s: %w", name, err)
	}
	return podRef{namespace: benchNamespace, name: name, uid: string(got.UID)}, nil
}

// istioCNI is Istio's plugin in sidecar mode, configured as its installer
// writes it for a node, with either backend.
type istioCNI struct {
	iptables, nftables *libcni.NetworkConfig
}

func newIstioCNI(dir, kubeconfig string) (*istioCNI, error) {
	runDir := filepath.Join(dir, "istio-cni-run")
	if err := os.MkdirAll(runDir, 0o700); err != nil {
		return nil, err
	}
	kc, err := os.ReadFile(kubeconfig)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(runDir, "istio-cni-kubeconfig"), kc, 0o600); err != nil {
		return nil, err
	}
	conf := func(native bool) (*libcni.NetworkConfig, error) {
		return libcni.NetworkPluginConfFromBytes([]byte(fmt.Sprintf(
			`{"cniVersion":"1.0.0","name":"istio-cni","type":"istio-cni","cni_agent_run_dir":%q,`+
				`"exclude_namespaces":["kube-system"],"native_nftables":%t,"plugin_log_level":"warn","prevResult":%s}`,
			runDir, native, prevResult)))
	}
	ic := &istioCNI{}
	if ic.iptables, err = conf(false); err != nil {
		return nil, err
	}
	ic.nftables, err = conf(true)
	return ic, err
}

// kubeResult is the Kubernetes-mode comparison: every plugin ADDs the same
// API-server pods, each in a netns of its own, interleaved pod by pod.
type kubeResult struct {
	loopback, sluice, istioIPT, istioNFT series
	standalone                           series // a standalone agent, interleaved with the rest
	istioErr                             error  // istio-cni could not be built or run
	burst                                *burstResult
}

func (n *node) kubeMode(c *cluster, ic *istioCNI, alone *node, count int) (*kubeResult, error) {
	res := &kubeResult{
		loopback:   series{name: "loopback ADD"},
		standalone: series{name: "sluice ADD, standalone agent"},
		sluice:     series{name: "sluice ADD, Kubernetes mode"},
		istioIPT:   series{name: "istio-cni ADD, iptables"},
		istioNFT:   series{name: "istio-cni ADD, nftables"},
	}
	type step struct {
		s  *series
		fn func(id, ns string, p podRef) (time.Duration, error)
	}
	steps := []step{
		{&res.loopback, func(id, ns string, p podRef) (time.Duration, error) { return n.run(n.loopback, id, ns, p) }},
		{&res.standalone, func(id, ns string, p podRef) (time.Duration, error) { return alone.run(alone.sluice, id, ns, p) }},
		{&res.sluice, func(id, ns string, p podRef) (time.Duration, error) { return n.run(n.sluice, id, ns, p) }},
	}
	if ic != nil {
		steps = append(steps,
			step{&res.istioIPT, func(id, ns string, p podRef) (time.Duration, error) { return n.run(ic.iptables, id, ns, p) }},
			step{&res.istioNFT, func(id, ns string, p podRef) (time.Duration, error) { return n.run(ic.nftables, id, ns, p) }})
	}
	conn, err := grpc.NewClient("unix://"+n.socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	debug := sluicev1.NewDebugClient(conn)
	for i := range count {
		pod, err := c.sidecarPod(fmt.Sprintf("kube-%d", i))
		if err != nil {
			return nil, err
		}
		// The informer has to have the pod, as on a node where the kubelet
		// only starts a sandbox for a pod it was told about. Asked once per
		// pod over one connection kept for the run: no connection is set up
		// or torn down beside a timed ADD.
		if err := waitPolicyHas(debug, pod); err != nil {
			return nil, err
		}
		// The plugins take turns going first, so none always runs right
		// after the same other one (istio-cni leaves the most work behind).
		for k := range steps {
			j := (i + k) % len(steps)
			if err := n.kubeStep(steps[j].s, steps[j].fn, fmt.Sprintf("kube-%d-%d", i, j), pod); err != nil {
				return nil, err
			}
		}
	}
	return res, nil
}

// kubeStep times one plugin's ADD of pod p in a fresh netns with an
// interface, as a primary CNI would have left it.
func (n *node) kubeStep(s *series, fn func(id, ns string, p podRef) (time.Duration, error), id string, p podRef) error {
	path, err := n.nd.create(id)
	if err != nil {
		return err
	}
	defer n.nd.remove(path)
	if err := addPodInterface(path); err != nil {
		return err
	}
	d, err := fn(id, path, p)
	if err != nil {
		return fmt.Errorf("%s for pod %s: %w", s.name, p.name, err)
	}
	s.add(d)
	return nil
}

// waitPolicyHas asks the agent's Debug.Explain for the pod: the agent
// answers once the pod is in its informer (it would wait for an unknown
// pod itself; this keeps that wait out of the ADD's time), and must say
// capture.
func waitPolicyHas(debug sluicev1.DebugClient, p podRef) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := debug.Explain(ctx, &sluicev1.ExplainRequest{
		Pod: &sluicev1.PodRef{Namespace: p.namespace, Name: p.name, Uid: p.uid}})
	if err != nil {
		return fmt.Errorf("explain pod %s: %w", p.name, err)
	}
	if !resp.Capture {
		return fmt.Errorf("agent would not capture pod %s: %s", p.name, resp.Reason)
	}
	return nil
}

// run is one ADD of conf for pod p in nsPath, timed.
func (n *node) run(conf *libcni.NetworkConfig, id, nsPath string, p podRef) (time.Duration, error) {
	start := time.Now()
	_, err := n.lib.AddNetwork(context.Background(), conf, rcPod(id, nsPath, p))
	return time.Since(start), err
}

func rcPod(id, nsPath string, p podRef) *libcni.RuntimeConf {
	return &libcni.RuntimeConf{ContainerID: id, NetNS: nsPath, IfName: "eth0", Args: [][2]string{
		{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", p.namespace}, {"K8S_POD_NAME", p.name}, {"K8S_POD_UID", p.uid},
	}}
}

// benchKube starts the API server and an agent watching it, builds
// istio-cni (cached) and runs the Kubernetes-mode rows. istio-cni that
// cannot be built leaves its rows empty and says why in the report.
func benchKube(nd *nsDir, tmp, stateRoot string, b bins, count, burstCount int, smoke bool, cl *cleanups) (*kubeResult, error) {
	dir := filepath.Join(tmp, "node-kube")
	c, err := startCluster(filepath.Join(tmp, "cluster"))
	if err != nil {
		return nil, err
	}
	cl.add(c.stop)
	defer c.stop()
	n, err := newNode(nd, dir, b)
	if err != nil {
		return nil, err
	}
	// Journals on tmpfs, as the agent's default --state-dir (/var/run) is
	// on a node and as the other sections have them: on disk every ADD
	// pays an fsync (section 2's disk row).
	n.stateDir = filepath.Join(stateRoot, "node-kube")
	// The agent lives in its node netns; the API server on the machine's
	// loopback. A relay listening inside the node netns joins them (the
	// informers' traffic only; nothing on the ADD path talks to the API).
	l, err := listenIn(n.nodeNS)
	if err != nil {
		return nil, fmt.Errorf("relay to the API server: %w", err)
	}
	defer l.Close()
	go forward(l, strings.TrimPrefix(c.env.Host(), "https://"))
	agentKubeconfig := filepath.Join(dir, "agent-kubeconfig")
	if err := c.writeKubeconfig(agentKubeconfig, "https://"+l.Addr().String()); err != nil {
		return nil, err
	}
	n.extra = []string{"--kubeconfig", agentKubeconfig, "--node-name", benchNode}
	cl.add(n.stopAgent)
	if _, err := n.startAgent(); err != nil {
		return nil, err
	}
	defer n.stopAgent()
	alone, err := newNode(nd, filepath.Join(tmp, "node-kube-standalone"), b)
	if err != nil {
		return nil, err
	}
	alone.stateDir = filepath.Join(stateRoot, "node-kube-standalone")
	cl.add(alone.stopAgent)
	if _, err := alone.startAgent(); err != nil {
		return nil, err
	}
	defer alone.stopAgent()
	var ic *istioCNI
	istioErr := installIstioCNI(b.dir, smoke)
	if istioErr == nil {
		if ic, err = newIstioCNI(dir, c.kubeconfig); err != nil {
			return nil, err
		}
	}
	res, err := n.kubeMode(c, ic, alone, count)
	if err != nil {
		return nil, err
	}
	if res.burst, err = n.burst(c, ic, burstCount); err != nil {
		return nil, fmt.Errorf("burst: %w", err)
	}
	res.istioErr = istioErr
	return res, nil
}

// installIstioCNI builds istio-cni with hack/bench/istio-cni/build.sh (a
// cached binary after the first time) and copies it beside the plugins.
// cachedOnly (the smoke run) uses a cached build or none.
func installIstioCNI(binDir string, cachedOnly bool) error {
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	cmd := exec.Command(filepath.Join(root, "hack/bench/istio-cni/build.sh"))
	if cachedOnly {
		cmd.Env = append(os.Environ(), "ISTIO_CNI_CACHED_ONLY=1")
	}
	out, err := cmd.Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		return fmt.Errorf("hack/bench/istio-cni/build.sh: %v: %s", err, tail(stderr, 10))
	}
	bin, err := os.ReadFile(strings.TrimSpace(string(out)))
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(binDir, "istio-cni"), bin, 0o755)
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// moduleRoot is the nearest directory up from here holding go.mod: the
// repo root under `go run ./hack/bench` and under `go test` alike.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod above the working directory")
		}
		dir = parent
	}
}
