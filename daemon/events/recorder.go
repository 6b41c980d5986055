// Package events records Kubernetes Events on pods for what the agent did
// to them: capture failures, late capture, labels and evictions. An
// operator sees them in `kubectl describe pod` next to the kubelet's own.
//
// The recorder is its own small queue over the typed client rather than
// client-go's broadcasters: those log through klog (outside the agent's
// slog), and neither can flush its queue on shutdown, which is when an
// agent's last events matter most.
//
// It queues at most 256 Events, sends them from one goroutine, counts
// repeats on one Event, and flushes on shutdown within a deadline. Every
// reason is a constant in reasons.go, and PodRef keeps this package free
// of policy's imports.
package events

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

const (
	component = "sluice-agent"
	// The API server rejects longer messages from events.k8s.io; the same
	// bound keeps core/v1 ones readable.
	maxMessage = 1024
	queueSize  = 256
	// The number of distinct events remembered for counting repeats. When
	// it fills, the memory is cleared: a repeat then makes a new Event
	// instead of bumping a count, which costs an object, not correctness.
	maxRemembered = 4096
	callTimeout   = 10 * time.Second
)

// Config configures a Recorder.
type Config struct {
	// Client creates the Events; the identity needs create and patch on
	// events (deploy/rbac/clusterrole.yaml).
	Client kubernetes.Interface
	// NodeName is the source host shown with each Event.
	NodeName string
	Log      *slog.Logger
}

// Recorder sends Events on pods in the background. A nil *Recorder is
// valid and records nothing: the agent without Kubernetes (standalone) has
// nowhere to send them.
type Recorder struct {
	client kubernetes.Interface
	node   string
	log    *slog.Logger

	mu     sync.Mutex // guards closed against sends on a closed queue
	closed bool
	queue  chan *corev1.Event
	done   chan struct{}
	cancel context.CancelFunc // cuts a call in flight when Shutdown gives up

	// Only the sending goroutine touches sent.
	sent    map[eventKey]*corev1.Event
	dropped atomic.Int64
	failed  atomic.Int64
}

// eventKey identifies repeats of one event: same pod, type, reason and
// message. A repeat bumps the Event's count, as the kubelet's do.
type eventKey struct {
	namespace string
	uid       types.UID
	name      string
	eventType string
	reason    string
	message   string
}

// New starts a Recorder; call Shutdown when done.
func New(cfg Config) *Recorder {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &Recorder{
		client: cfg.Client,
		node:   cfg.NodeName,
		log:    cfg.Log,
		queue:  make(chan *corev1.Event, queueSize),
		done:   make(chan struct{}),
		cancel: cancel,
		sent:   map[eventKey]*corev1.Event{},
	}
	go r.run(ctx)
	return r
}

// Pod queues an Event on a pod; eventType is corev1.EventTypeNormal or
// corev1.EventTypeWarning, reason a CamelCase word. It never blocks: with
// the queue full (the API server away for long) the Event is dropped and
// counted.
func (r *Recorder) Pod(namespace, name string, uid types.UID, eventType, reason, message string) {
	if r == nil {
		return
	}
	message = truncate(message, maxMessage)
	now := metav1.Now()
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{
			// client-go's naming: unique per object and moment.
			Name:      fmt.Sprintf("%s.%x", name, now.UnixNano()),
			Namespace: namespace,
		},
		InvolvedObject: corev1.ObjectReference{
			Kind: "Pod", APIVersion: "v1", Namespace: namespace, Name: name, UID: uid,
		},
		Type:                eventType,
		Reason:              reason,
		Message:             message,
		Source:              corev1.EventSource{Component: component, Host: r.node},
		FirstTimestamp:      now,
		LastTimestamp:       now,
		Count:               1,
		ReportingController: component,
		ReportingInstance:   component + "-" + r.node,
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		r.dropped.Add(1)
		return
	}
	select {
	case r.queue <- ev:
	default:
		r.dropped.Add(1)
		r.log.Warn("event queue full; dropping event", "pod", namespace+"/"+name, "reason", reason)
	}
}

// Shutdown sends what is queued and stops. It waits until the queue is
// empty or ctx ends, whichever is first; Events after it are dropped.
func (r *Recorder) Shutdown(ctx context.Context) {
	if r == nil {
		return
	}
	r.mu.Lock()
	if !r.closed {
		r.closed = true
		close(r.queue)
	}
	r.mu.Unlock()
	select {
	case <-r.done:
	case <-ctx.Done():
		before := r.dropped.Load()
		r.cancel()
		<-r.done
		r.log.Warn("shutdown cut the event queue short", "unsent", r.dropped.Load()-before)
	}
	r.cancel()
}

// truncate cuts s to at most n bytes on a rune boundary, marking the cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n - len("...")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}

// Dropped counts Events never sent: queue full, or queued after Shutdown.
func (r *Recorder) Dropped() int64 {
	if r == nil {
		return 0
	}
	return r.dropped.Load()
}

// Failed counts Events the API server did not take.
func (r *Recorder) Failed() int64 {
	if r == nil {
		return 0
	}
	return r.failed.Load()
}

func (r *Recorder) run(ctx context.Context) {
	defer close(r.done)
	for ev := range r.queue {
		if ctx.Err() != nil {
			// Shutdown gave up: drain without sending.
			r.dropped.Add(1)
			continue
		}
		if err := r.send(ctx, ev); err != nil {
			// One try: retrying would hold every later Event behind an
			// API server that is away; the log keeps what was lost.
			r.failed.Add(1)
			r.log.Warn("could not record event", "pod", ev.Namespace+"/"+ev.InvolvedObject.Name,
				"type", ev.Type, "reason", ev.Reason, "message", ev.Message, "err", err)
			continue
		}
		r.log.Debug("recorded event", "pod", ev.Namespace+"/"+ev.InvolvedObject.Name, "type", ev.Type, "reason", ev.Reason)
	}
}

// send creates ev, or bumps the count of the Event it repeats.
func (r *Recorder) send(ctx context.Context, ev *corev1.Event) error {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	key := eventKey{ev.Namespace, ev.InvolvedObject.UID, ev.InvolvedObject.Name, ev.Type, ev.Reason, ev.Message}
	events := r.client.CoreV1().Events(ev.Namespace)
	if prev, ok := r.sent[key]; ok {
		patch, err := json.Marshal(map[string]any{"count": prev.Count + 1, "lastTimestamp": ev.LastTimestamp})
		if err != nil {
			return fmt.Errorf("encode count patch for event %s/%s: %w", prev.Namespace, prev.Name, err)
		}
		got, err := events.Patch(ctx, prev.Name, types.MergePatchType, patch, metav1.PatchOptions{})
		if err == nil {
			r.sent[key] = got
			return nil
		}
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("bump count of event %s/%s: %w", prev.Namespace, prev.Name, err)
		}
		// The API server expired it (events live an hour): start anew.
	}
	got, err := events.Create(ctx, ev, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create event %s/%s: %w", ev.Namespace, ev.Name, err)
	}
	if len(r.sent) >= maxRemembered {
		clear(r.sent)
	}
	r.sent[key] = got
	return nil
}
