package peer

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicemesh/sluice/test/harness/nodetest"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// podStartSamplesEnv names a file BenchmarkPodStart writes every pod's
// start time to, by mode, for hack/bench's node lifecycle section.
const podStartSamplesEnv = "SLUICE_PODSTART_SAMPLES"

type podStartSamples struct {
	Modes []podStartMode `json:"modes"`
}

type podStartMode struct {
	Mode    string  `json:"mode"`
	StartNS []int64 `json:"start_ns"` // create → Ready
	AppNS   []int64 `json:"app_ns"`   // create → the app's first log line
}

// BenchmarkPodStart times pod start, create → Ready as the API server
// reports it, for b.N pods in each of four modes on the same node, one
// mode after another: no mesh CNI, istio-cni (Istio's chart, sidecar
// mode), sluice chained (its chart) and sluice NRI (its chart with
// trigger=nri: no conflist entry, the agent a plugin of the node's
// containerd). Every pod is the same sidecar pod less its
// istio-validation, which would fail with no mesh CNI; each is deleted
// before the next is created. Ready is seen only as the kubelet reports
// it, after its relist (1 s by default): the first figure moves in steps
// of about that. The second, create → the app's first log line as
// containerd stamped it, on the same clock, resolves what a CNI adds: the
// sandbox, its network and the app's start. After a sluice mode's pods one more, not
// timed, must find its first dial captured: a mode that captured nothing
// would time nothing.
func BenchmarkPodStart(b *testing.B) {
	ns := namespace(b)
	if installed {
		uninstallIstioCNI(b)
	}
	modes := []struct {
		name    string
		on, off func(testing.TB)
		check   func(testing.TB, string)
		start   []int64
		app     []int64
	}{
		{name: "none"},
		{name: "istio-cni", on: requireAgent, off: uninstallIstioCNI},
		{name: "sluice", on: installSluice, off: uninstallSluice, check: podCaptured},
		{name: "sluice-nri", on: installSluiceNRI, off: uninstallSluice, check: podCaptured},
	}
	var out podStartSamples
	for _, m := range modes {
		if m.on != nil {
			m.on(b)
		}
		b.Run(m.name, func(b *testing.B) {
			b.StopTimer()
			m.start, m.app = nil, nil // b.Run calls this again with a larger b.N: keep the last
			for range b.N {
				ready, app := podStart(b, ns, fmt.Sprintf("start-%s-%d", m.name, seq.Add(1)))
				m.start, m.app = append(m.start, ready.Nanoseconds()), append(m.app, app.Nanoseconds())
			}
		})
		if m.check != nil {
			m.check(b, ns)
		}
		if m.off != nil {
			m.off(b)
		}
		out.Modes = append(out.Modes, podStartMode{Mode: m.name, StartNS: m.start, AppNS: m.app})
	}
	if file := os.Getenv(podStartSamplesEnv); file != "" {
		data, err := json.Marshal(out)
		if err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(file, data, 0o644); err != nil {
			b.Fatal(err)
		}
	}
}

// podStart creates the pod, polls it every 20 ms until its Ready
// condition is true, deletes it, waits for it to be gone and returns
// create → Ready and create → the app's first log line.
func podStart(b *testing.B, ns, name string) (ready, app time.Duration) {
	p := sidecarPod(name, unreachable)
	p.Spec.InitContainers = nil
	p.Spec.NodeSelector = map[string]string{corev1.LabelHostname: cluster.NodeName}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pods := client(b).CoreV1().Pods(ns)
	b.StartTimer()
	start := time.Now()
	if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
		b.Fatalf("create pod %s/%s: %v", ns, name, err)
	}
	var took time.Duration
	for took == 0 {
		got, err := pods.Get(ctx, name, metav1.GetOptions{})
		switch {
		case err != nil:
			b.Fatalf("pod %s/%s: %v", ns, name, err)
		case nodetest.PodReady(got):
			took = time.Since(start)
		case time.Since(start) > time.Minute:
			b.Fatalf("pod %s/%s not Ready after a minute: %s", ns, name, nodetest.PodState(got))
		default:
			time.Sleep(20 * time.Millisecond) // the poll period: the measurement's resolution
		}
	}
	b.StopTimer()
	app = appFirstLine(b, ns, name).Sub(start)
	cluster.DeletePod(ns, name)
	nodetest.Eventually(b, time.Minute, "pod "+name+" gone", func() error {
		if _, err := pods.Get(ctx, name, metav1.GetOptions{}); err == nil {
			return fmt.Errorf("still there")
		}
		return nil
	})
	return took, app
}

// appFirstLine is the timestamp containerd gave the app container's first
// log line ("app listening on …", printed once it listens).
func appFirstLine(b *testing.B, ns, name string) time.Time {
	raw, err := client(b).CoreV1().Pods(ns).GetLogs(name, &corev1.PodLogOptions{Container: "app", Timestamps: true}).
		DoRaw(context.Background())
	if err != nil {
		b.Fatalf("logs of %s/%s: %v", ns, name, err)
	}
	first, _, _ := strings.Cut(string(raw), "\n")
	stamp, line, _ := strings.Cut(first, " ")
	at, err := time.Parse(time.RFC3339Nano, stamp)
	if err != nil || !strings.HasPrefix(line, "app listening") {
		b.Fatalf("%s/%s: the app's first log line %q is not its timestamped start (%v)", ns, name, first, err)
	}
	return at
}

// uninstallIstioCNI removes the istio-cni release and waits for its
// SIGTERM to take its entry out of the conflist.
func uninstallIstioCNI(t testing.TB) {
	helm(t, "uninstall", release, "-n", releaseNS, "--wait")
	installed = false
	conflistWithout(t, "istio-cni")
}

// The sluice release, as test/node installs it.
const (
	sluiceRelease = "sluice"
	sluiceNS      = "kube-system"
)

// installSluice installs sluice's chart with the image built from this
// tree and waits for its entry in the conflist.
func installSluice(t testing.TB) {
	helm(t, "install", sluiceRelease, "deploy/helm/sluice", "-n", sluiceNS, "--wait",
		"--set", "image.repository="+images.SluiceRepo, "--set", "image.tag="+images.SluiceTag,
		"--set", "image.pullPolicy=Never")
	nodetest.Eventually(t, time.Minute, "sluice chained last", func() error {
		if types := cluster.RuntimeConflistTypes(t); types[len(types)-1] != "sluice" {
			return fmt.Errorf("conflist plugins %v", types)
		}
		return nil
	})
}

// installSluiceNRI installs sluice's chart with trigger=nri and waits for
// its agent to be Ready, which with that trigger includes being connected
// to the node's containerd as an NRI plugin (/readyz's nri check). The
// conflist is the primary CNI's alone.
func installSluiceNRI(t testing.TB) {
	helm(t, "install", sluiceRelease, "deploy/helm/sluice", "-n", sluiceNS, "--wait",
		"--set", "image.repository="+images.SluiceRepo, "--set", "image.tag="+images.SluiceTag,
		"--set", "image.pullPolicy=Never", "--set", "trigger=nri")
	if types := cluster.RuntimeConflistTypes(t); slices.Contains(types, "sluice") {
		t.Fatalf("conflist plugins with trigger=nri: %v, want no sluice entry", types)
	}
}

// podCaptured runs one more pod, not timed, and checks its app's first
// dial: captured, it is answered by the pod's proxy or refused while the
// proxy is not listening yet; uncaptured, TEST-NET-1 is unreachable.
func podCaptured(t testing.TB, ns string) {
	p := sidecarPod(fmt.Sprintf("captured-%d", seq.Add(1)), unreachable)
	p.Spec.InitContainers = nil // as the timed pods
	p = cluster.CreatePod(t, ns, p)
	defer cluster.DeletePod(ns, p.Name)
	cluster.RunningPod(t, ns, p.Name, time.Minute)
	var first string
	nodetest.Eventually(t, 30*time.Second, p.Name+"'s first dial", func() error {
		for _, l := range strings.Split(logs(t, ns, p.Name, "app"), "\n") {
			if strings.HasPrefix(l, "app dial ") {
				first = l
				return nil
			}
		}
		return fmt.Errorf("no dial logged yet")
	})
	if !strings.Contains(first, "proxy captured") && !strings.Contains(first, "refused") {
		t.Fatalf("pod %s started uncaptured: its first dial %q", p.Name, first)
	}
}

func uninstallSluice(t testing.TB) {
	helm(t, "uninstall", sluiceRelease, "-n", sluiceNS, "--wait")
	conflistWithout(t, "sluice")
}

// conflistWithout waits until the node's conflist no longer chains typ.
func conflistWithout(t testing.TB, typ string) {
	t.Helper()
	nodetest.Eventually(t, time.Minute, typ+" out of the conflist", func() error {
		if types := cluster.RuntimeConflistTypes(t); slices.Contains(types, typ) {
			return fmt.Errorf("conflist plugins %v", types)
		}
		return nil
	})
}
