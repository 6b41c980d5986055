package mesh

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluicemesh/sluice/test/harness/nodetest"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// appPod serves "app" on 8080 (logging "app served <peer>") and dials
// dial every half second (logging "app dial <dial>: <reply or error>"),
// as the pod's service account, on the first node (onNode moves it).
func appPod(name, serviceAccount, dial string, labels map[string]string) *corev1.Pod {
	zero := int64(0)
	l := map[string]string{"app": name}
	for k, v := range labels {
		l[k] = v
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l},
		Spec: corev1.PodSpec{
			NodeSelector:       map[string]string{hostnameLabel: cluster.NodeName},
			ServiceAccountName: serviceAccount,
			Containers: []corev1.Container{{
				Name: "app", Image: images.TestApp, ImagePullPolicy: corev1.PullNever,
				Command: []string{"/testapp", "app", "8080", dial},
			}},
			TerminationGracePeriodSeconds: &zero,
		},
	}
}

// hostnameLabel names a node in a pod's nodeSelector (the scheduler still
// places the pod, minding taints, as it does any pod).
const hostnameLabel = "kubernetes.io/hostname"

// onNode puts p on node.
func onNode(p *corev1.Pod, node string) *corev1.Pod {
	p.Spec.NodeSelector = map[string]string{hostnameLabel: node}
	return p
}

// start creates the pod and waits until it runs.
func start(t *testing.T, ns string, p *corev1.Pod) *corev1.Pod {
	t.Helper()
	if _, err := client(t).CoreV1().Pods(ns).Create(t.Context(), p, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod %s/%s: %v", ns, p.Name, err)
	}
	return running(t, ns, p.Name)
}

// running waits until the pod runs and has an IP.
func running(t *testing.T, ns, name string) *corev1.Pod {
	t.Helper()
	cs := client(t)
	var got *corev1.Pod
	eventually(t, 2*time.Minute, "pod "+ns+"/"+name+" Running", func() error {
		var err error
		if got, err = cs.CoreV1().Pods(ns).Get(t.Context(), name, metav1.GetOptions{}); err != nil {
			return err
		}
		if got.Status.Phase != corev1.PodRunning || got.Status.PodIP == "" {
			return fmt.Errorf("%s", nodetest.PodState(got))
		}
		return nil
	})
	return got
}

// dials are a pod's dial results in its log, in order: "app" for a reply
// from the app, else the error.
func dials(t testing.TB, ns, pod string) []string {
	t.Helper()
	var out []string
	for _, line := range strings.Split(logs(t, ns, pod, "app"), "\n") {
		if _, res, ok := strings.Cut(line, ": "); ok && strings.HasPrefix(line, "app dial ") {
			out = append(out, res)
		}
	}
	return out
}

// served counts the connections a pod's app answered from peer IP ip.
func served(t testing.TB, ns, pod, ip string) int {
	t.Helper()
	n := 0
	for _, line := range strings.Split(logs(t, ns, pod, "app"), "\n") {
		if strings.HasPrefix(line, "app served "+ip+":") {
			n++
		}
	}
	return n
}

// count is how many of results are exactly want, and how many are not.
func count(results []string, want string) (hit, miss int) {
	for _, r := range results {
		if r == want {
			hit++
		} else {
			miss++
		}
	}
	return hit, miss
}

// meshLogs are the last lines of istiod's, ztunnel's and the agent's logs,
// for a failed run.
func meshLogs() string {
	cs, err := cluster.Client()
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, w := range []struct{ ns, selector string }{
		{istioNS, "app=istiod"}, {istioNS, "app=ztunnel"}, {releaseNS, "app=" + agentApp},
	} {
		l, err := cs.CoreV1().Pods(w.ns).List(context.Background(), metav1.ListOptions{LabelSelector: w.selector})
		if err != nil {
			fmt.Fprintf(&b, "%s: %v\n", w.selector, err)
			continue
		}
		for _, p := range l.Items {
			tail := int64(60)
			out, err := cs.CoreV1().Pods(w.ns).GetLogs(p.Name, &corev1.PodLogOptions{TailLines: &tail}).DoRaw(context.Background())
			fmt.Fprintf(&b, "--- %s/%s (%s) %v\n%s\n", w.ns, p.Name, nodetest.PodState(&p), err, out)
		}
	}
	return b.String()
}
