package istioadopt

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/vishvananda/netns"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/sluicemesh/sluice/daemon/kubecache"
	"github.com/sluicemesh/sluice/daemon/late"
	"github.com/sluicemesh/sluice/daemon/redirection"
	"github.com/sluicemesh/sluice/daemon/workloads"
	"github.com/sluicemesh/sluice/daemon/ztunnel"
)

// Pending knows this node's ambient pods another node agent
// (istio-cni) enrolled, marked ambient.istio.io/redirection=enabled, that
// sluice has not adopted yet. ztunnel drops every pod its snapshot leaves
// out, so until the Adopter adopts them they are listed in each snapshot
// (ztunnel.Config.Pending), and ztunnel keeps their proxies across the
// swap of node agents.
//
// The annotation is only a hint: a pod may set it on itself. A pod is
// listed only when istio-cni's rules are found in its netns, the proof
// that istio-cni, not the pod, decided it is ambient; one whose netns
// cannot be read is left out, and ztunnel then drops a proxy that Istio's
// rules still send to (closed, never open).
type Pending struct {
	records  func() []workloads.Record // what sluice holds (Store.List)
	hostProc string
	open     func(path string) (netns.NsHandle, error)
	istio    Kernel
	log      *slog.Logger
	reg      cache.ResourceEventHandlerRegistration

	mu   sync.Mutex
	pods map[types.UID]*corev1.Pod
}

// NewPending watches pods, the agent's shared pod informer; it may
// be called before the informer runs. records lists what sluice holds; it
// is called only from List. open opens a pod's netns (podns.Opener.Open);
// istio reads istio-cni's rules there (nil: Netlink).
func NewPending(pods coreinformers.PodInformer, records func() []workloads.Record, hostProc string,
	open func(string) (netns.NsHandle, error), istio Kernel, log *slog.Logger) (*Pending, error) {
	if istio == nil {
		istio = Netlink{}
	}
	p := &Pending{records: records, hostProc: hostProc, open: open, istio: istio, log: log, pods: map[types.UID]*corev1.Pod{}}
	reg, err := pods.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    p.update,
		UpdateFunc: func(_, obj any) { p.update(obj) },
		DeleteFunc: func(obj any) {
			if pod, ok := kubecache.DeletedPod(obj); ok {
				p.mu.Lock()
				delete(p.pods, pod.UID)
				p.mu.Unlock()
			}
		},
	})
	if err != nil {
		return nil, fmt.Errorf("watch pods pending adoption: %w", err)
	}
	p.reg = reg
	return p, nil
}

func (p *Pending) update(obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if pod.Annotations[redirection.Annotation] == "enabled" && late.Settled(pod) {
		p.pods[pod.UID] = pod
	} else {
		delete(p.pods, pod.UID)
	}
}

// List returns the pods marked enabled that have no sluice record and
// whose netns holds istio-cni's rules, each with its netns. It waits for
// the pod cache to list once, within ctx: an unsynced cache would make the
// list short.
func (p *Pending) List(ctx context.Context) ([]ztunnel.Workload, error) {
	if err := wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(context.Context) (bool, error) {
		return p.reg.HasSynced(), nil
	}); err != nil {
		return nil, fmt.Errorf("wait for the pod cache: %w", err)
	}
	enrolled := map[string]bool{}
	for _, r := range p.records() {
		enrolled[r.PodUID] = true
	}
	p.mu.Lock()
	var pods []*corev1.Pod
	for uid, pod := range p.pods {
		if !enrolled[string(uid)] {
			pods = append(pods, pod)
		}
	}
	p.mu.Unlock()
	out := make([]ztunnel.Workload, 0, len(pods))
	for _, pod := range pods {
		path, err := p.istioEnrolled(pod)
		if err != nil {
			p.log.Warn("pod marked ambient by annotation is not listed to ztunnel", "pod", pod.Namespace+"/"+pod.Name, "uid", pod.UID, "why", err)
			continue
		}
		out = append(out, ztunnel.Workload{UID: string(pod.UID), Name: pod.Name, Namespace: pod.Namespace,
			ServiceAccount: pod.Spec.ServiceAccountName, Netns: path})
	}
	return out, nil
}

// istioEnrolled returns the pod's netns path when istio-cni's rules are
// there, or why not.
func (p *Pending) istioEnrolled(pod *corev1.Pod) (string, error) {
	path, err := late.FindNetns(p.hostProc, pod)
	if err != nil {
		return "", fmt.Errorf("its netns was not found: %w", err)
	}
	ns, err := p.open(path)
	if err != nil {
		return "", fmt.Errorf("open its netns %s: %w", path, err)
	}
	defer ns.Close()
	c, err := p.istio.Detect(ns)
	switch {
	case err != nil:
		return "", fmt.Errorf("read istio-cni's rules in %s: %w", path, err)
	case !c.Found():
		return "", fmt.Errorf("no istio-cni rules in its netns %s: only istio-cni's or sluice's decision puts a pod in ztunnel's snapshot", path)
	}
	return path, nil
}
