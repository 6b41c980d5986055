// Package fleet measures what sluice agents ask of one API server in a
// simulated fleet (test/harness/fleet: Node objects, namespaces and pods
// with no kubelets, churned as a cluster churns), from the API server's own
// audit log and each agent's resident memory: counts, not timings. make
// bench runs it at the size; make test at a small one.
package fleet

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/sluicemesh/sluice/internal/productbuild"
	"github.com/sluicemesh/sluice/test/harness/agenttest"
	"github.com/sluicemesh/sluice/test/harness/fleet"
	"github.com/sluicemesh/sluice/test/harness/kubetest"
	"github.com/sluicemesh/sluice/test/harness/nstest"
	"github.com/sluicemesh/sluice/test/harness/proctest"
)

// The sizes make test runs; make bench sets them larger (SLUICE_FLEET_*).
var (
	agents  = envInt("SLUICE_FLEET_AGENTS", 5)
	small   = fleet.Spec{Nodes: envInt("SLUICE_FLEET_NODES", 500), Namespaces: 100, Pods: envInt("SLUICE_FLEET_PODS", 2000)}
	grown   = fleet.Spec{Nodes: small.Nodes, Namespaces: envInt("SLUICE_FLEET_NAMESPACES", 1000), Pods: envInt("SLUICE_FLEET_GROWN_PODS", 3*small.Pods)}
	churn   = 20 // pod changes a second across the fleet: SIG Scalability's steady state
	steady  = 20 * time.Second
	ownPods = 10 // pods on each agent's node
)

// Targets: per agent, counted by the API server.
const (
	// maxStartLists: one LIST per informer (pods of its node, namespaces,
	// its own node) and no more.
	maxStartLists = 3
	// maxSteadyRequests: requests an agent makes, other than its open
	// watches, while the fleet churns for `steady`.
	maxSteadyRequests = 0
	// maxGrowthKiB: what growing the fleet's namespaces tenfold and its
	// pods threefold may add to an agent's resident memory.
	maxGrowthKiB = 5 << 10
	// maxAddReads and maxAmbientWrites: per ADD, a GET of a pod the
	// agent's cache has not seen yet (its watch races the runtime: the
	// named exception), and the one PATCH of ambient.istio.io/redirection.
	// Nothing else, for any pod.
	maxAddReads      = 1
	maxAmbientWrites = 1
	// maxWatchShare: what an agent receives from the API server while the
	// fleet churns, as a share of what an unscoped pod watch receives (its
	// own node's pods do not change meanwhile: it should be bookmarks).
	maxWatchShare = 0.02
)

var bin agenttest.Bin

// testApp holds the ZDS stand-in each agent hands its ambient pods to.
var testApp = productbuild.Target{Name: "testapp", Pkg: "github.com/sluicemesh/sluice/test/node/testapp"}

func TestMain(m *testing.M) {
	if os.Geteuid() != 0 {
		fmt.Println("fleet: not root; every test will skip")
		os.Exit(m.Run())
	}
	var err error
	if bin, err = agenttest.Build(context.Background(), productbuild.Options{Dir: "../.."}, agenttest.Loopback, testApp); err != nil {
		fmt.Fprintln(os.Stderr, "fleet:", err)
		os.Exit(1)
	}
	code := m.Run()
	bin.Remove()
	os.Exit(code)
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func agentUser(i int) string { return fmt.Sprintf("fleet-agent-%d", i) }

// An agent's cost to the API server is flat in the fleet's size: it LISTs
// once per informer at start, scoped to its node (pods) or the cluster's
// namespaces; while the fleet churns 20 pods a second it asks nothing
// beyond its watches; a sidecar or plain pod's ADD writes nothing; and
// growing the fleet's namespaces and pods adds little to its memory.
func TestFleetAPIFootprint(t *testing.T) {
	nstest.RequireRoot(t)
	users := make([]string, agents)
	for i := range users {
		users[i] = agentUser(i)
	}
	env := kubetest.StartWith(t, kubetest.Options{Audit: true}, users...)
	admin := kubernetes.NewForConfigOrDie(env.AdminConfig())
	bindAll(t, env, admin, users)
	ctx := t.Context()
	f := fleet.New(env.AdminConfig())
	began := time.Now()
	if err := f.Grow(ctx, small); err != nil {
		t.Fatal(err)
	}
	t.Logf("fleet of %d nodes, %d namespaces, %d pods in %v", small.Nodes, small.Namespaces, small.Pods, time.Since(began).Round(time.Second))
	figure(t, "fleet", "%d nodes, %d namespaces, %d pods, %d agents (%d pods on each agent's node)", small.Nodes, small.Namespaces, small.Pods, agents, ownPods)
	for i := range agents {
		for j := range ownPods {
			if _, err := f.Place(ctx, fleet.Namespace(j), fmt.Sprintf("own-%d-%d", i, j), fleet.NodeName(i), nil, true); err != nil {
				t.Fatal(err)
			}
		}
	}

	nodes := make([]*agentNode, agents)
	for i := range nodes {
		nodes[i] = startAgent(t, env, i)
	}
	for _, n := range nodes {
		n.waitReady(t)
	}
	// The last of an agent's start requests is the startup taint's look at
	// its own node, once it is ready: the start ends there.
	var audit auditLog
	nstest.Eventually(t, 60*time.Second, func() bool {
		audit = auditOf(t, env)
		for i := range nodes {
			if !slices.ContainsFunc(audit.by(agentUser(i), "get"), func(ev kubetest.AuditEvent) bool { return ev.Resource() == "nodes" }) {
				return false
			}
		}
		return true
	}, "every agent's look at its node's startup taint")
	var startLists []int
	for i := range nodes {
		lists := audit.by(agentUser(i), "list")
		startLists = append(startLists, len(lists))
		t.Logf("agent %d at start: %d LISTs %v, %d watches", i, len(lists), resources(lists), len(audit.by(agentUser(i), "watch")))
		if len(lists) > maxStartLists {
			t.Errorf("agent %d LISTed %d times at start, want at most %d: %v", i, len(lists), maxStartLists, uris(lists))
		}
		for _, l := range lists {
			if l.Resource() == "pods" && !strings.Contains(l.URI, "spec.nodeName") {
				t.Errorf("agent %d LISTed pods unscoped: %s", i, l.URI)
			}
		}
	}

	// Steady state: the fleet churns; agents should ask nothing new, and
	// receive on their watches what their own node's pods do, not what the
	// cluster's do. An unscoped pod watch beside them is the yardstick.
	figure(t, "start: LISTs per agent", "%s (pods of its node, namespaces)", spread(startLists))
	mark := len(audit.all)
	received := make([]uint64, agents)
	startBytes := make([]int, agents)
	for i, n := range nodes {
		received[i] = apiBytes(t, n.agent.Cmd.Process.Pid, env)
		startBytes[i] = int(received[i])
	}
	figure(t, "start: bytes received per agent", "%s", spread(startBytes))
	churnCtx, stop := context.WithTimeout(ctx, steady)
	unscoped := make(chan int64, 1)
	go func() { unscoped <- watchBytes(churnCtx, admin) }()
	go f.Heartbeat(churnCtx, 10*time.Second)
	changes := f.Churn(churnCtx, churn)
	stop()
	all := <-unscoped
	churned := make([]int, agents)
	for i, n := range nodes {
		got := apiBytes(t, n.agent.Cmd.Process.Pid, env) - received[i]
		churned[i] = int(got)
		t.Logf("agent %d received %d bytes from the API server while an unscoped pod watch received %d", i, got, all)
		if float64(got) > maxWatchShare*float64(all) {
			t.Errorf("agent %d received %d bytes during the churn, more than %.0f %% of an unscoped pod watch's %d", i, got, 100*maxWatchShare, all)
		}
	}
	if all < 10<<10 {
		t.Fatalf("the unscoped watch saw only %d bytes of the churn: no yardstick", all)
	}
	figure(t, "steady: watch bytes per agent during the churn", "%s; an unscoped pod watch: %d", spread(churned), all)
	audit = auditOf(t, env)
	steadyAsked := make([]int, agents)
	for i := range nodes {
		var asked []kubetest.AuditEvent
		for _, ev := range audit.all[mark:] {
			if ev.User.Username == agentUser(i) && ev.Verb != "watch" {
				asked = append(asked, ev)
			}
		}
		t.Logf("agent %d during %d pod changes in %v: %d requests %v", i, changes, steady, len(asked), uris(asked))
		steadyAsked[i] = len(asked)
		if len(asked) > maxSteadyRequests {
			t.Errorf("agent %d made %d requests in steady state, want at most %d: %v", i, len(asked), maxSteadyRequests, uris(asked))
		}
	}
	figure(t, "steady: requests per agent", "%s in %v of %d pod changes (%.1f/s), Leases renewed every 10 s", spread(steadyAsked), steady, changes, float64(changes)/steady.Seconds())
	if changes < churn*int(steady/time.Second)/2 {
		t.Fatalf("the fleet churned only %d pod changes in %v", changes, steady)
	}

	// The ADD of a sidecar pod and of a plain pod asks nothing; an ambient
	// pod's ADD writes once: the annotation istiod needs.
	addFootprint(t, env, admin, f, nodes[0])

	// A DaemonSet rollout: every agent stops and starts again at once.
	restartStorm(t, env, admin, nodes, small)

	// Size: ten times the namespaces, three times the pods.
	before := make([]int, agents)
	for i, na := range nodes {
		before[i] = rssKiB(t, na.agent.Cmd.Process.Pid)
	}
	mark = len(auditOf(t, env).all)
	began = time.Now()
	if err := f.Grow(ctx, grown); err != nil {
		t.Fatal(err)
	}
	t.Logf("fleet grown to %d namespaces, %d pods in %v", grown.Namespaces, grown.Pods, time.Since(began).Round(time.Second))
	// The agents' namespace watches deliver the last of the growth.
	time.Sleep(5 * time.Second)
	audit = auditOf(t, env)
	var rssBefore, rssAfter, growth []int
	growAsked := 0
	for i, na := range nodes {
		after := rssKiB(t, na.agent.Cmd.Process.Pid)
		rssBefore, rssAfter, growth = append(rssBefore, before[i]), append(rssAfter, after), append(growth, after-before[i])
		t.Logf("agent %d: RSS %d KiB at %d namespaces and %d pods, %d KiB at %d and %d", i, before[i], small.Namespaces, small.Pods, after, grown.Namespaces, grown.Pods)
		if after-before[i] > maxGrowthKiB {
			t.Errorf("agent %d grew %d KiB with the fleet, want at most %d", i, after-before[i], maxGrowthKiB)
		}
		for _, ev := range audit.all[mark:] {
			if ev.User.Username == agentUser(i) && ev.Verb != "watch" {
				t.Errorf("agent %d asked %s %s while the fleet grew", i, ev.Verb, ev.URI)
				growAsked++
			}
		}
	}
	figure(t, "size: RSS per agent (KiB)", "%s at %d namespaces and %d pods; %s at %d and %d", spread(rssBefore), small.Namespaces, small.Pods, spread(rssAfter), grown.Namespaces, grown.Pods)
	figure(t, "size: RSS growth per agent (KiB)", "%s", spread(growth))
	figure(t, "size: requests while the fleet grew", "%d (all agents)", growAsked)

	// A rollout at the grown size.
	restartStorm(t, env, admin, nodes, grown)
}

// figure logs one of the figures make bench's fleet section prints
// (hack/bench collects the lines that start "figure:").
func figure(t *testing.T, what, format string, args ...any) {
	t.Helper()
	t.Logf("figure: %s | %s", what, fmt.Sprintf(format, args...))
}

// spread is the median and the largest of xs.
func spread(xs []int) string {
	s := slices.Clone(xs)
	slices.Sort(s)
	return fmt.Sprintf("median %d, max %d", s[len(s)/2], s[len(s)-1])
}

// bindAll binds every agent user to the shipped ClusterRole.
func bindAll(t *testing.T, env *kubetest.Env, c kubernetes.Interface, users []string) {
	t.Helper()
	if err := env.BindClusterRole(users[0], "../../deploy/rbac/clusterrole.yaml"); err != nil {
		t.Fatal(err)
	}
	first, err := c.RbacV1().ClusterRoleBindings().Get(t.Context(), users[0], metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range users[1:] {
		b := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: u}, RoleRef: first.RoleRef,
			Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: u}}}
		if _, err := c.RbacV1().ClusterRoleBindings().Create(t.Context(), b, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// agentNode is one real agent for one of the fleet's nodes: it runs in the
// machine's netns to reach the API server on loopback, and its kernel side
// (pod netns, the host probe table) is the node's private netns.
type agentNode struct {
	*agenttest.Node
	agent   *proctest.Proc
	i       int
	chain   *agenttest.Chain
	ztunnel *proctest.Proc // the test app's ZDS stand-in
	conf    string
	cniBin  string
}

func startAgent(t *testing.T, env *kubetest.Env, i int) *agentNode {
	n := &agentNode{Node: agenttest.NewNode(t), i: i}
	n.conf = filepath.Join(n.Dir, "conf")
	n.cniBin = filepath.Join(n.Dir, "cnibin")
	for _, d := range []string{n.conf, n.cniBin, filepath.Join(n.Dir, "ztunnel")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	n.agent = n.spawn(t, env)
	n.ztunnel = proctest.Start(t, exec.Command(bin.Path(testApp.Name), "ztunnel", n.ztunnelSocket()))
	n.chain = agenttest.NewChain(t, n.NS, []byte(fmt.Sprintf(`{"cniVersion":"1.1.0","name":"fleet","plugins":[
		{"type":"loopback"},
		{"type":"sluice","socket":%q,"timeout":"5s"}]}`, n.Socket)), bin.Dir)
	return n
}

func (n *agentNode) ztunnelSocket() string { return filepath.Join(n.Dir, "ztunnel", "ztunnel.sock") }

// spawn starts this node's agent process: at first, and again in a rollout
// on the same state dir.
func (n *agentNode) spawn(t *testing.T, env *kubetest.Env) *proctest.Proc {
	return proctest.Start(t, exec.Command(bin.Agent(),
		"--kubeconfig", env.Kubeconfig(t, agentUser(n.i)),
		"--node-name", fleet.NodeName(n.i),
		"--socket", n.Socket, "--state-dir", n.StateDir, "--netns-roots", n.Root,
		"--health-addr", "127.0.0.1:0", "--install=false", "--cni-conf-dir", n.conf, "--cni-bin-dir", n.cniBin,
		"--plugin-binary", bin.Plugin(),
		"--ambient", "--host-netns", n.NS.Path, "--ztunnel-socket", n.ztunnelSocket(),
		"--ztunnel-connect-wait", "10s", "--log-level", "warn"))
}

func (n *agentNode) waitReady(t *testing.T) {
	n.agent.Wait(t, 60*time.Second, func() bool {
		resp, err := n.Status()
		return err == nil && resp.Ready
	}, fmt.Sprintf("agent %d never became ready", n.i))
}

// add runs the CNI ADD of p on this node through libcni, as the runtime
// would once the pod is bound here.
func (n *agentNode) add(t *testing.T, p *corev1.Pod) {
	t.Helper()
	ns := n.Pod(p.Name)
	rc := agenttest.PodRuntime(p.Name+"-sandbox", ns)
	rc.Args = [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", p.Namespace}, {"K8S_POD_NAME", p.Name}, {"K8S_POD_UID", string(p.UID)}}
	if _, err := n.chain.Add(rc); err != nil {
		t.Fatalf("ADD of %s: %v", p.Name, err)
	}
}

func sidecarPod() *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{"sidecar.istio.io/status": `{"containers":["istio-proxy"]}`}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}, {Name: "istio-proxy", Image: "proxyv2"}}}}
}

type auditLog struct{ all []kubetest.AuditEvent }

func auditOf(t *testing.T, env *kubetest.Env) auditLog {
	t.Helper()
	all, err := env.Audit()
	if err != nil {
		t.Fatal(err)
	}
	return auditLog{all}
}

func (a auditLog) by(user, verb string) []kubetest.AuditEvent {
	var out []kubetest.AuditEvent
	for _, ev := range a.all {
		if ev.User.Username == user && ev.Verb == verb {
			out = append(out, ev)
		}
	}
	return out
}

func resources(evs []kubetest.AuditEvent) []string {
	var out []string
	for _, ev := range evs {
		out = append(out, ev.Resource())
	}
	return out
}

func uris(evs []kubetest.AuditEvent) []string {
	var out []string
	for _, ev := range evs {
		out = append(out, ev.Verb+" "+ev.URI)
	}
	return out
}

func rssKiB(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kib, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return kib
		}
	}
	t.Fatalf("no VmRSS for %d", pid)
	return 0
}

// watchBytes watches every pod of the cluster until ctx ends and returns
// the bytes it received: what an agent that watched the cluster would.
func watchBytes(ctx context.Context, c kubernetes.Interface) int64 {
	r, err := c.CoreV1().RESTClient().Get().Resource("pods").Param("watch", "true").Stream(ctx)
	if err != nil {
		return 0
	}
	defer r.Close()
	n, _ := io.Copy(io.Discard, r)
	return n
}

// apiBytes is what the process pid has received on its TCP connections to
// the API server, as the kernel counts it (tcp_info's bytes_received, read
// with sock_diag, the sockets matched to pid by inode).
func apiBytes(t *testing.T, pid int, env *kubetest.Env) uint64 {
	t.Helper()
	u, err := url.Parse(env.Host())
	if err != nil {
		t.Fatal(err)
	}
	port, _ := strconv.Atoi(u.Port())
	mine := map[uint32]bool{}
	fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	for _, fd := range fds {
		link, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		if ino, ok := strings.CutPrefix(link, "socket:["); ok && err == nil {
			n, _ := strconv.ParseUint(strings.TrimSuffix(ino, "]"), 10, 32)
			mine[uint32(n)] = true
		}
	}
	socks, err := netlink.SocketDiagTCPInfo(unix.AF_INET)
	if err != nil {
		t.Fatal(err)
	}
	var total uint64
	for _, s := range socks {
		if s.InetDiagMsg != nil && s.TCPInfo != nil && mine[s.InetDiagMsg.INode] && int(s.InetDiagMsg.ID.DestinationPort) == port {
			total += s.TCPInfo.Bytes_received
		}
	}
	return total
}
