package mesh

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

const annRedirection = "ambient.istio.io/redirection"

// A pod sluice enrolls in ambient carries ambient.istio.io/redirection:
// enabled, and the unmodified istiod publishes it as an HBONE workload
// (its /debug/ambientz, the workload xDS view); a pod opted out with
// istio.io/dataplane-mode: none and a pod in an unlabelled namespace are
// left alone and published as plain workloads. With the real ztunnel,
// ztunnel's own config_dump says HBONE too.
func TestEnrolledPodIsAnHBONEWorkload(t *testing.T) {
	mesh := namespace(t, map[string]string{labelDataplane: "ambient"})
	plainNS := namespace(t, nil)
	a := start(t, mesh, appPod("a", "", "127.0.0.1:1", nil))
	out := start(t, mesh, appPod("out", "", "127.0.0.1:1", map[string]string{labelDataplane: "none"}))
	plain := start(t, plainNS, appPod("plain", "", "127.0.0.1:1", nil))

	// The agent sets the annotation before the ADD returns, so a running
	// pod's annotations are final.
	for _, c := range []struct {
		pod  *corev1.Pod
		want string
	}{{a, "enabled"}, {out, ""}, {plain, ""}} {
		if got := c.pod.Annotations[annRedirection]; got != c.want {
			t.Errorf("%s/%s: %s = %q, want %q", c.pod.Namespace, c.pod.Name, annRedirection, got, c.want)
		}
	}

	istiodPod := readyPod(t, istioNS, "app=istiod", "", time.Minute)
	want := map[string]string{mesh + "/a": "HBONE", mesh + "/out": "", plainNS + "/plain": ""}
	eventually(t, time.Minute, "istiod to publish the three pods", func() error {
		got, err := istiodWorkloads(istiodPod)
		if err != nil {
			return err
		}
		return sameProtocols(got, want)
	})
	if noZtunnel != nil {
		return
	}
	zt := readyPod(t, istioNS, "app=ztunnel", cluster.NodeName, time.Minute)
	eventually(t, time.Minute, "ztunnel to hold the three pods", func() error {
		got, err := ztunnelWorkloads(zt)
		if err != nil {
			return err
		}
		// ztunnel names a workload's inbound protocol TCP when it is not
		// HBONE.
		return sameProtocols(got, map[string]string{mesh + "/a": "HBONE", mesh + "/out": "TCP", plainNS + "/plain": "TCP"})
	})
}

// sameProtocols compares the protocols of the wanted workloads.
func sameProtocols(got, want map[string]string) error {
	for w, proto := range want {
		p, ok := got[w]
		if !ok {
			return fmt.Errorf("no workload %s", w)
		}
		if p != proto {
			return fmt.Errorf("workload %s protocol %q, want %q", w, p, proto)
		}
	}
	return nil
}

// istiodWorkloads are the workloads istiod's ambient index holds
// (namespace/name -> tunnel protocol, "" for none), read from its debug
// endpoint from inside its pod: istiod serves its debug endpoints to
// anyone else only with a token of its own namespace.
func istiodWorkloads(istiod *corev1.Pod) (map[string]string, error) {
	body, err := inPod(istiod, "http://127.0.0.1:15014/debug/ambientz")
	if err != nil {
		return nil, err
	}
	var dump struct {
		Workloads []struct {
			Name, Namespace, TunnelProtocol string
		}
	}
	if err := json.Unmarshal([]byte(body), &dump); err != nil {
		return nil, fmt.Errorf("istiod's ambientz: %w", err)
	}
	out := map[string]string{}
	for _, w := range dump.Workloads {
		out[w.Namespace+"/"+w.Name] = w.TunnelProtocol
	}
	return out, nil
}

// ztunnelWorkloads are the workloads in ztunnel's config_dump (its admin
// port listens on the pod's loopback only, so it is read from inside the
// pod's netns).
func ztunnelWorkloads(zt *corev1.Pod) (map[string]string, error) {
	body, err := inPod(zt, "http://127.0.0.1:15000/config_dump")
	if err != nil {
		return nil, err
	}
	var dump struct {
		Workloads []struct {
			Name, Namespace, Protocol string
		}
	}
	if err := json.Unmarshal([]byte(body), &dump); err != nil {
		return nil, fmt.Errorf("ztunnel's config_dump: %w", err)
	}
	out := map[string]string{}
	for _, w := range dump.Workloads {
		out[w.Namespace+"/"+w.Name] = w.Protocol
	}
	return out, nil
}
