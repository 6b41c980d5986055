// Package nri is the agent's second trigger: a containerd NRI plugin that
// enrols a pod when the runtime reports its sandbox, with no conflist entry
// on the node. Every event goes through the same ADD and DEL path as the
// CNI plugin's calls (rpc.CNI), so a pod gets the same decision and the
// same kernel state whichever trigger saw it.
//
// Records are <sandbox id>/eth0 with no network name. Each event's budget
// is min(runtime request timeout / 2, 1 s). Synchronize never returns an
// error (that would cost the connection): it releases the records of
// sandboxes the runtime does not list (not late ones), enrols what is
// missing within the budget and the rest after replying. CreateContainer
// refuses a container of a pod neither enrolled nor passed through, after
// one more try to enrol; pass-through decisions are kept in memory per
// sandbox. The plugin reconnects forever (100 ms doubling to 5 s) and
// asks for the failure policy FailRequest, KeepConnected. With --trigger
// nri nothing is installed, and a leftover sluice conflist entry is
// removed once the runtime has configured the plugin; --install=false
// leaves the conf dir alone.
package nri

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/containerd/nri/pkg/api"

	sluicev1 "github.com/sluicemesh/sluice/api/sluice/v1"
	"github.com/sluicemesh/sluice/daemon/workloads"
)

// Name and Index identify the plugin to the runtime; a validator's
// required_plugins lists Name.
const (
	Name  = "sluice"
	Index = "10"
)

// IfName is the interface name NRI enrolments are recorded under: the one
// the runtime's CNI ADD for the same sandbox uses, so in "both" mode the
// two triggers converge on one attachment.
const IfName = "eth0"

// CNI is the agent's ADD/DEL path (rpc.CNI).
type CNI interface {
	Add(context.Context, *sluicev1.AddRequest) (*sluicev1.AddResponse, error)
	Del(context.Context, *sluicev1.DelRequest) (*sluicev1.DelResponse, error)
}

// Store is what the plugin reads of the enrolled workloads.
type Store interface {
	Get(workloads.Attachment) (workloads.Record, bool)
	List() []workloads.Record
}

// Plugin handles the runtime's pod events. Build it with New.
type Plugin struct {
	cni   CNI
	store Store
	log   *slog.Logger
	// onConnected, when set, runs after each connection is configured,
	// with the runtime's name and version: NRI is confirmed on the node.
	onConnected func(runtime string)

	mu        sync.Mutex
	timeout   func() time.Duration // the runtime's request timeout, once known
	runtime   string               // "containerd v2.4.2", once configured
	connected bool
	passed    map[string]string // sandbox id → why it needs no capture
}

// New builds a plugin that enrols through cni and reads store; onConnected
// may be nil.
func New(cni CNI, store Store, log *slog.Logger, onConnected func(runtime string)) *Plugin {
	return &Plugin{cni: cni, store: store, log: log, onConnected: onConnected, passed: map[string]string{}}
}

// budgetFor is the time one event may take: half the runtime's request
// timeout, at most a second. A handler that overruns the runtime's timeout
// is worse than one that fails: the runtime starts the pod uncaptured and
// drops the plugin, so the agent gives up first and the pod fails closed.
func budgetFor(requestTimeout time.Duration) time.Duration {
	if requestTimeout <= 0 {
		requestTimeout = 2 * time.Second // NRI's default
	}
	return min(requestTimeout/2, time.Second)
}

// Configure records which runtime this is (the stub keeps the request
// timeout it announces, which eventContext reads).
func (p *Plugin) Configure(_ context.Context, _, runtime, version string) (api.EventMask, error) {
	p.mu.Lock()
	p.runtime = runtime + " " + version
	p.mu.Unlock()
	p.log.Info("configured by the runtime", "runtime", runtime, "version", version)
	return 0, nil // every event this plugin handles
}

// Runtime is the runtime's name and version once it has configured the
// plugin ("" before).
func (p *Plugin) Runtime() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.runtime
}

// eventContext bounds one event by the budget for the runtime's timeout.
func (p *Plugin) eventContext(ctx context.Context) (context.Context, context.CancelFunc) {
	p.mu.Lock()
	timeout := p.timeout
	p.mu.Unlock()
	var t time.Duration
	if timeout != nil {
		t = timeout()
	}
	return context.WithTimeout(ctx, budgetFor(t))
}

// RunPodSandbox enrols the pod: the runtime calls it after the CNI chain
// has run and before any container exists. An error fails the sandbox.
func (p *Plugin) RunPodSandbox(ctx context.Context, pod *api.PodSandbox) error {
	ctx, cancel := p.eventContext(ctx)
	defer cancel()
	return p.enrol(ctx, pod, "RunPodSandbox")
}

// StopPodSandbox releases the pod while its netns is still there.
func (p *Plugin) StopPodSandbox(ctx context.Context, pod *api.PodSandbox) error {
	p.release(ctx, pod, "StopPodSandbox")
	return nil
}

// RemovePodSandbox releases whatever Stop could not (a runtime that sends
// Stop after the netns is gone, or a Stop that failed). Never an error:
// teardown must not block on the agent.
func (p *Plugin) RemovePodSandbox(ctx context.Context, pod *api.PodSandbox) error {
	p.release(ctx, pod, "RemovePodSandbox")
	return nil
}

// CreateContainer refuses a container of a pod the agent has not captured
// and not decided to pass through: that pod's RunPodSandbox was missed
// (the agent was away) or failed open (it timed out). It tries once more
// to enrol the pod first, so a pod is refused only when capture is
// impossible now.
func (p *Plugin) CreateContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	if p.captured(pod) {
		return nil, nil, nil
	}
	ctx, cancel := p.eventContext(ctx)
	defer cancel()
	if err := p.enrol(ctx, pod, "CreateContainer"); err != nil {
		return nil, nil, fmt.Errorf("sluice: container %s of pod %s/%s refused: the pod is not captured: %w",
			ctr.GetName(), pod.GetNamespace(), pod.GetName(), err)
	}
	return nil, nil, nil
}

// captured is true when the pod has a record or was passed through.
func (p *Plugin) captured(pod *api.PodSandbox) bool {
	if netnsOf(pod) == "" {
		return true // host network: nothing to capture
	}
	if _, ok := p.store.Get(workloads.Attachment{ContainerID: pod.GetId(), IfName: IfName}); ok {
		return true
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	_, ok := p.passed[pod.GetId()]
	return ok
}
