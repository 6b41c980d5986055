// Package fleet simulates a cluster's worth of nodes on the harness's own
// API server (kubetest): Node objects, namespaces and pods bound to the
// nodes, with no kubelets. The simulator writes what a kubelet would (a
// pod's IPs, Running and Ready; the node's Lease renewals) and churns pods
// across the fleet, so real sluice agents, each given one of the nodes, can
// be measured against a cluster of the size they would meet: what they ask
// of the API server, and what it costs them.
package fleet

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// Spec is a fleet's size.
type Spec struct {
	Nodes, Namespaces, Pods int
}

// NodeName is the name of the fleet's i-th node.
func NodeName(i int) string { return fmt.Sprintf("fleet-node-%05d", i) }

// Namespace is the name of the fleet's i-th namespace.
func Namespace(i int) string { return fmt.Sprintf("fleet-ns-%05d", i) }

// Fleet is what the simulator has put on the API server.
type Fleet struct {
	c    kubernetes.Interface
	rnd  *rand.Rand
	mu   sync.Mutex
	have Spec
	pods []pod // every pod the fleet holds
	seq  atomic.Int64
}

type pod struct{ ns, name string }

// New is an empty fleet on the API server cfg names. The client's rate
// limit is lifted: the simulator plays thousands of kubelets.
func New(cfg *rest.Config) *Fleet {
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = 5000, 10000
	return &Fleet{c: kubernetes.NewForConfigOrDie(cfg), rnd: rand.New(rand.NewPCG(1, 2))}
}

// workers is how many requests the simulator has in flight at once.
const workers = 32

// Grow adds what to holds beyond what the fleet has: nodes (Ready, with a
// Lease), namespaces, and pods spread over the nodes and namespaces,
// Running and Ready with an IP, as their kubelets would report them.
func (f *Fleet) Grow(ctx context.Context, to Spec) error {
	f.mu.Lock()
	from := f.have
	f.mu.Unlock()
	if err := parallel(ctx, from.Nodes, to.Nodes, f.createNode); err != nil {
		return err
	}
	if err := parallel(ctx, from.Namespaces, to.Namespaces, f.createNamespace); err != nil {
		return err
	}
	nodes, namespaces := max(to.Nodes, 1), max(to.Namespaces, 1)
	err := parallel(ctx, from.Pods, to.Pods, func(ctx context.Context, i int) error {
		return f.createPod(ctx, Namespace(i%namespaces), fmt.Sprintf("p-%07d", i), NodeName((i*7919)%nodes), nil, true)
	})
	if err != nil {
		return err
	}
	f.mu.Lock()
	f.have = to
	f.mu.Unlock()
	return nil
}

// Place creates a pod on node in namespace ns, with labels and annotations
// from tmpl when given, and returns it: Running and Ready when running,
// else Pending, as a pod is while its sandbox's CNI ADD runs.
func (f *Fleet) Place(ctx context.Context, ns, name, node string, tmpl *corev1.Pod, running bool) (*corev1.Pod, error) {
	if err := f.createPod(ctx, ns, name, node, tmpl, running); err != nil {
		return nil, err
	}
	return f.c.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
}

// Churn replaces perSecond pods a second across the fleet until ctx ends
// (a deletion and a creation each count as a change, as SIG Scalability
// counts them) and returns how many changes it made.
func (f *Fleet) Churn(ctx context.Context, perSecond int) int {
	tick := time.NewTicker(time.Second / time.Duration(max(perSecond/2, 1)))
	defer tick.Stop()
	changes := 0
	for {
		select {
		case <-ctx.Done():
			return changes
		case <-tick.C:
		}
		f.mu.Lock()
		if len(f.pods) == 0 || f.have.Nodes == 0 {
			f.mu.Unlock()
			continue
		}
		i := f.rnd.IntN(len(f.pods))
		victim := f.pods[i]
		f.pods[i] = f.pods[len(f.pods)-1]
		f.pods = f.pods[:len(f.pods)-1]
		node := NodeName(f.rnd.IntN(f.have.Nodes))
		f.mu.Unlock()
		if err := f.c.CoreV1().Pods(victim.ns).Delete(ctx, victim.name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err == nil {
			changes++
		}
		if err := f.createPod(ctx, victim.ns, fmt.Sprintf("churn-%07d", f.seq.Add(1)), node, nil, true); err == nil {
			changes++
		}
	}
}

// Heartbeat renews every node's Lease once per interval, spread over it,
// as kubelets do (10 s by default), until ctx ends.
func (f *Fleet) Heartbeat(ctx context.Context, interval time.Duration) {
	f.mu.Lock()
	nodes := f.have.Nodes
	f.mu.Unlock()
	if nodes == 0 {
		return
	}
	tick := time.NewTicker(interval / time.Duration(nodes))
	defer tick.Stop()
	for i := 0; ; i = (i + 1) % nodes {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		leases := f.c.CoordinationV1().Leases(corev1.NamespaceNodeLease)
		if l, err := leases.Get(ctx, NodeName(i), metav1.GetOptions{}); err == nil {
			l.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
			leases.Update(ctx, l, metav1.UpdateOptions{})
		}
	}
}

func (f *Fleet) createNode(ctx context.Context, i int) error {
	name := NodeName(i)
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name}},
		Status: corev1.NodeStatus{
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
				LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}},
			Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: fmt.Sprintf("10.%d.%d.1", 128+i/256, i%256)}},
		},
	}
	got, err := f.c.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create node %s: %w", name, err)
	}
	if err == nil {
		got.Status = n.Status
		if _, err := f.c.CoreV1().Nodes().UpdateStatus(ctx, got, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("node %s status: %w", name, err)
		}
	}
	holder := name
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: corev1.NamespaceNodeLease},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, RenewTime: &metav1.MicroTime{Time: time.Now()}}}
	if _, err := f.c.CoordinationV1().Leases(corev1.NamespaceNodeLease).Create(ctx, lease, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("lease of %s: %w", name, err)
	}
	return nil
}

func (f *Fleet) createNamespace(ctx context.Context, i int) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace(i)}}
	if _, err := f.c.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace %s: %w", ns.Name, err)
	}
	return nil
}

// createPod creates a pod bound to node and, when running, reports it
// Running and Ready, as the node's kubelet would once its sandbox is up.
func (f *Fleet) createPod(ctx context.Context, ns, name, node string, tmpl *corev1.Pod, running bool) error {
	p := &corev1.Pod{}
	if tmpl != nil {
		p = tmpl.DeepCopy()
	}
	p.Name, p.Namespace, p.Spec.NodeName = name, ns, node
	if len(p.Spec.Containers) == 0 {
		p.Spec.Containers = []corev1.Container{{Name: "app", Image: "app"}}
	}
	got, err := f.c.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create pod %s/%s: %w", ns, name, err)
	}
	if !running {
		return nil
	}
	seq := f.seq.Add(1)
	ip := fmt.Sprintf("10.%d.%d.%d", seq>>16&63, seq>>8&255, seq&255)
	now := metav1.Now()
	got.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}, StartTime: &now,
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now}}}
	if _, err := f.c.CoreV1().Pods(ns).UpdateStatus(ctx, got, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("status of pod %s/%s: %w", ns, name, err)
	}
	f.mu.Lock()
	f.pods = append(f.pods, pod{ns, name})
	f.mu.Unlock()
	return nil
}

// parallel runs do for i in [from, to) on workers goroutines and returns
// the first error.
func parallel(ctx context.Context, from, to int, do func(context.Context, int) error) error {
	if to <= from {
		return nil
	}
	next := atomic.Int64{}
	next.Store(int64(from))
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= to || ctx.Err() != nil {
					return
				}
				if err := do(ctx, i); err != nil {
					errs[w] = err
					return
				}
			}
		})
	}
	wg.Wait()
	return errors.Join(append(errs, ctx.Err())...)
}
