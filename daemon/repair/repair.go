// Package repair acts on pods found running uncaptured: policy says they
// must be captured, sluice holds no record of them, and istio-cni does not
// capture them either. They started before the agent was ready, or while it
// was down and the plugin was not in the chain. What it does is
// --repair-mode's: programs their rules now (apply, a late enrolment),
// labels them (label), evicts them so they are recreated through the
// plugin (delete, through the Eviction API), or only reports them (off).
// Each action is recorded as an Event on the pod. Finding such pods, and
// retrying a failed repair, is podcheck's.
//
// label writes through pods/status, so the ClusterRole's only pod write
// cannot change a spec; --repair-label (default sluice.dev/uncaptured=true)
// is validated as the API server would. delete goes through the Eviction
// API, so PodDisruptionBudgets apply: a refusal (a 429 included) is a
// failed repair to retry, not an eviction, and the update an eviction
// causes is not acted on again. off reports once per pod. A pod's netns
// is found from the host's /proc, by pod UID in the cgroup path (cgroupfs
// and systemd spellings), then by pod IP on an interface; the oldest
// matching process is used.
package repair

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/sluicemesh/sluice/daemon/events"
	"github.com/sluicemesh/sluice/daemon/workloads"
)

// The repair modes (--repair-mode).
const (
	ModeApply = "apply"
	ModeLabel = "label"
	// ModeDelete evicts the pod through the Eviction API, which honours
	// PodDisruptionBudgets.
	ModeDelete = "delete"
	// ModeOff only reports (log, Event, metric).
	ModeOff = "off"
)

// The outcomes of a repair, one per mode.
const (
	OutcomeApplied  = "applied"
	OutcomeLabelled = "labelled"
	OutcomeEvicted  = "evicted"
	OutcomeReported = "reported" // --repair-mode=off
)

// Outcomes is every outcome of a repair.
var Outcomes = []string{OutcomeApplied, OutcomeLabelled, OutcomeEvicted, OutcomeReported}

// Config configures a Repairer.
type Config struct {
	Store *workloads.Store
	// Client labels and evicts pods; the identity needs what the mode
	// uses: patch on pods/status (label), create on pods/eviction
	// (delete).
	Client kubernetes.Interface
	Events *events.Recorder // nil records nothing
	// HostProc is the host's /proc as the agent sees it (--host-proc),
	// where apply finds a pod's netns.
	HostProc string
	Mode     string
	// Label is what --repair-mode=label sets (--repair-label); empty:
	// sluice.dev/uncaptured=true.
	Label Label
	Log   *slog.Logger
}

// Repairer repairs one uncaptured pod at a time, as its caller hands them.
type Repairer struct {
	cfg Config
	log *slog.Logger

	mu sync.Mutex
	// handled are the pods evicted (delete) or reported (off): an update
	// that races the eviction, or any later one, must not act again.
	handled map[types.UID]bool
}

// New validates cfg.
func New(cfg Config) (*Repairer, error) {
	switch cfg.Mode {
	case ModeApply, ModeLabel, ModeDelete, ModeOff:
	default:
		return nil, fmt.Errorf("repair: mode %q: want %s, %s, %s or %s", cfg.Mode, ModeApply, ModeLabel, ModeDelete, ModeOff)
	}
	if cfg.Label == (Label{}) {
		cfg.Label = DefaultLabel
	}
	if err := cfg.Label.Validate(); err != nil {
		return nil, fmt.Errorf("repair: %w", err)
	}
	switch {
	case cfg.Store == nil:
		return nil, errors.New("repair: no workload store")
	case cfg.Client == nil:
		return nil, errors.New("repair: no Kubernetes client")
	case cfg.Mode == ModeApply && cfg.HostProc == "":
		return nil, errors.New("repair: mode apply needs the host's /proc to find pod netns")
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	return &Repairer{cfg: cfg, log: cfg.Log, handled: map[types.UID]bool{}}, nil
}

// Done reports whether an uncaptured pod needs nothing more from this
// mode, without asking policy: label mode finds its label on it, delete
// and off modes have already evicted or reported it.
func (r *Repairer) Done(pod *corev1.Pod) bool {
	switch r.cfg.Mode {
	case ModeLabel:
		return r.cfg.Label.On(pod)
	case ModeOff, ModeDelete:
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.handled[pod.UID]
	}
	return false
}

// Forget drops what is kept about a deleted pod.
func (r *Repairer) Forget(pod *corev1.Pod) {
	r.mu.Lock()
	delete(r.handled, pod.UID)
	r.mu.Unlock()
}
