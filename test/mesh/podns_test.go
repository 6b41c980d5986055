package mesh

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/sluicemesh/sluice/test/harness/nstest"
)

// containerPIDs are the processes of a running pod's first container,
// found by the container's ID in their cgroup paths.
func containerPIDs(p *corev1.Pod) ([]int, error) {
	if len(p.Status.ContainerStatuses) == 0 {
		return nil, fmt.Errorf("pod %s has no container yet", p.Name)
	}
	_, id, ok := strings.Cut(p.Status.ContainerStatuses[0].ContainerID, "://")
	if !ok || id == "" {
		return nil, fmt.Errorf("pod %s: container ID %q", p.Name, p.Status.ContainerStatuses[0].ContainerID)
	}
	cgroups, _ := filepath.Glob("/proc/[0-9]*/cgroup")
	var pids []int
	for _, f := range cgroups {
		b, err := os.ReadFile(f)
		if err != nil || !strings.Contains(string(b), id) {
			continue
		}
		if pid, err := strconv.Atoi(filepath.Base(filepath.Dir(f))); err == nil {
			pids = append(pids, pid)
		}
	}
	if len(pids) == 0 {
		return nil, fmt.Errorf("no process of pod %s's container %s", p.Name, id)
	}
	return pids, nil
}

// podNetns is the network namespace of a running pod.
func podNetns(p *corev1.Pod) (*nstest.NS, error) {
	pids, err := containerPIDs(p)
	if err != nil {
		return nil, err
	}
	return &nstest.NS{Name: p.Name, Path: fmt.Sprintf("/proc/%d/ns/net", pids[0])}, nil
}

// inPod fetches url from inside the pod's network namespace.
func inPod(p *corev1.Pod, url string) (string, error) {
	ns, err := podNetns(p)
	if err != nil {
		return "", err
	}
	return getIn(ns, url)
}
