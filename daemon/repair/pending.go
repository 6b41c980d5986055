package repair

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/sluicemesh/sluice/daemon/podns"
	"github.com/sluicemesh/sluice/daemon/workloads"
	"github.com/sluicemesh/sluice/daemon/ztunnel"
)

// PendingAmbient knows this node's ambient pods another node agent
// (istio-cni) enrolled, marked ambient.istio.io/redirection=enabled, that
// sluice has not adopted yet. ztunnel drops every pod its snapshot leaves
// out, so until the repairer adopts them they are listed in each snapshot
// (ztunnel.Config.Pending), and ztunnel keeps their proxies across the
// swap of node agents.
type PendingAmbient struct {
	records  func() []workloads.Record // what sluice holds (Store.List)
	hostProc string
	log      *slog.Logger
	reg      cache.ResourceEventHandlerRegistration

	mu   sync.Mutex
	pods map[types.UID]*corev1.Pod
}

// NewPendingAmbient watches pods, the agent's shared pod informer; it may
// be called before the informer runs. records lists what sluice holds; it
// is called only from List.
func NewPendingAmbient(pods coreinformers.PodInformer, records func() []workloads.Record, hostProc string, log *slog.Logger) (*PendingAmbient, error) {
	p := &PendingAmbient{records: records, hostProc: hostProc, log: log, pods: map[types.UID]*corev1.Pod{}}
	reg, err := pods.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    p.update,
		UpdateFunc: func(_, obj any) { p.update(obj) },
		DeleteFunc: func(obj any) {
			if pod, ok := deletedPod(obj); ok {
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

func (p *PendingAmbient) update(obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if pod.Annotations[AnnotationRedirection] == "enabled" && settled(pod) {
		p.pods[pod.UID] = pod
	} else {
		delete(p.pods, pod.UID)
	}
}

// List returns the pods marked enabled that have no sluice record, each
// with its netns (empty when it cannot be found: ztunnel is then asked to
// keep the pod as it is). It waits for the pod cache to list once, within
// ctx: an unsynced cache would make the list short.
func (p *PendingAmbient) List(ctx context.Context) ([]ztunnel.Workload, error) {
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
		path, err := podns.FindPodNetns(p.hostProc, string(pod.UID), podIPs(pod))
		if err != nil {
			p.log.Warn("netns of a pod pending adoption not found", "pod", pod.Namespace+"/"+pod.Name, "uid", pod.UID, "err", err)
		}
		out = append(out, ztunnel.Workload{UID: string(pod.UID), Name: pod.Name, Namespace: pod.Namespace,
			ServiceAccount: pod.Spec.ServiceAccountName, Netns: path})
	}
	return out, nil
}
