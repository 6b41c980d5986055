package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	"google.golang.org/grpc/codes"

	"github.com/sluicemesh/sluice/internal/cniwire"
	"github.com/sluicemesh/sluice/internal/grpccall"
	"github.com/sluicemesh/sluice/internal/pluginconf"
)

// apiVersion is the wire contract this plugin speaks.
const apiVersion = cniwire.ApiVersion_API_VERSION_2

// agent is sluice-agent at its socket. Every call is a connection of its
// own: one exec makes one call. trace is the runtime's trace context,
// sent with every call (tracecontext.go).
type agent struct {
	socket string
	trace  []grpccall.Header
}

func newAgent(socket string) *agent {
	return &agent{socket: socket, trace: traceHeaders(os.Getenv)}
}

// wireRequest and wireResponse are cniwire's messages.
type wireRequest interface {
	AppendWire([]byte) ([]byte, error)
}

type wireResponse interface {
	UnmarshalWire([]byte) error
}

// agentPoll is how often a call waiting for the agent dials again.
const agentPoll = 100 * time.Millisecond

// callWaiting is call, dialling again every agentPoll while nothing
// listens on the socket, until ctx ends: the agent restarting (a rolling
// upgrade, a crash) costs a pod that comes in the gap only the gap. A pod
// whose ADD fails is tried again by the kubelet only after its pod
// worker's backoff (10 s and more), which is what a rolling upgrade added
// to a pod's start before. It still fails closed: with no agent by the
// deadline the call fails as before. DEL and STATUS do not wait (DEL
// never fails, and STATUS reports now).
func (a *agent) callWaiting(ctx context.Context, method string, req wireRequest, resp wireResponse) error {
	t := time.NewTimer(agentPoll)
	defer t.Stop()
	for waited := false; ; waited = true {
		err := a.call(ctx, method, req, resp)
		switch {
		case err == nil:
			return nil
		case grpccall.NotListening(err):
		case waited && pastDeadline(ctx) && !answered(err):
			// A try begun just before the deadline failed on it (a dial's
			// i/o timeout, or no answer): the agent was waited for until
			// the deadline, and that is the error.
			return &waitedError{err}
		default:
			return err
		}
		t.Reset(agentPoll)
		select {
		case <-ctx.Done():
			return &waitedError{err}
		case <-t.C:
		}
		// The deadline and the poll can come together, and select picks
		// either: a try begun past the deadline could only fail on it.
		if pastDeadline(ctx) {
			return &waitedError{err}
		}
	}
}

// pastDeadline reads the clock: ctx.Err() is set a moment after the
// deadline passes (later still on a loaded machine), and a dial in that
// moment already fails with an i/o timeout.
func pastDeadline(ctx context.Context) bool {
	dl, ok := ctx.Deadline()
	return ctx.Err() != nil || ok && !time.Now().Before(dl)
}

// answered says whether the agent answered the call (with an error).
func answered(err error) bool {
	var st *grpccall.Status
	return errors.As(err, &st) && st.Answered
}

// waitedError is a call that found no agent listening until its deadline.
type waitedError struct{ err error }

func (e *waitedError) Error() string {
	return "nothing listening until the plugin's deadline: " + e.err.Error()
}

func (e *waitedError) Unwrap() error { return e.err }

// call sends req to method and decodes the answer into resp. A request the
// agent would refuse for its size is refused here, before anything is sent.
func (a *agent) call(ctx context.Context, method string, req wireRequest, resp wireResponse) error {
	b, err := req.AppendWire(nil)
	if err != nil {
		return &encodeError{err}
	}
	if len(b) > pluginconf.MaxRequestBytes {
		return &oversizeError{len(b)}
	}
	out, err := grpccall.Call(ctx, a.socket, method, b, a.trace...)
	if err != nil {
		return err
	}
	if err := resp.UnmarshalWire(out); err != nil {
		return &grpccall.Status{Code: codes.Internal, Message: "cannot read the agent's answer: " + err.Error()}
	}
	return nil
}

// callError turns a failed call into a CNI error that names the socket and
// the cause. Anything that may pass on retry is "try again later" (11), so
// the runtime retries the pod instead of giving up on it.
func (a *agent) callError(ctx context.Context, verb string, err error) *types.Error {
	var big *oversizeError
	if errors.As(err, &big) {
		return types.NewError(types.ErrInvalidNetworkConfig, fmt.Sprintf("sluice %s: %v", verb, big), "")
	}
	var enc *encodeError
	if errors.As(err, &enc) {
		return types.NewError(types.ErrInvalidEnvironmentVariables, fmt.Sprintf("sluice %s: %v", verb, enc), "")
	}
	code, msg := grpccall.Code(err), err.Error()
	var st *grpccall.Status
	answered := false
	if errors.As(err, &st) {
		msg, answered = st.Message, st.Answered
	}
	var waited *waitedError
	if errors.As(err, &waited) {
		return types.NewError(types.ErrTryAgainLater, fmt.Sprintf("sluice %s: sluice-agent at %s is not available: "+
			"waited for it until the plugin's deadline: %s", verb, a.socket, msg), "")
	}
	switch code {
	case codes.Unavailable, codes.DeadlineExceeded, codes.ResourceExhausted, codes.Canceled, codes.Aborted:
		return types.NewError(types.ErrTryAgainLater, a.retryMessage(ctx, verb, code, answered, msg), "")
	case codes.InvalidArgument:
		return types.NewError(types.ErrInvalidEnvironmentVariables,
			fmt.Sprintf("sluice %s: refused by sluice-agent: %s", verb, msg), "")
	default:
		return types.NewError(types.ErrInternal,
			fmt.Sprintf("sluice %s: sluice-agent at %s: %s: %s", verb, a.socket, code, msg), "")
	}
}

// retryMessage names who cannot take the call now. The agent that answered
// is up: its message names the cause (no ztunnel connected, its state dir
// full, busy), and blaming the agent would send an operator to the wrong pod.
func (a *agent) retryMessage(ctx context.Context, verb string, code codes.Code, answered bool, msg string) string {
	if answered {
		return fmt.Sprintf("sluice %s: sluice-agent at %s cannot capture the pod now (it retries): %s", verb, a.socket, msg)
	}
	cause := msg
	if ctx.Err() != nil {
		if dl, ok := ctx.Deadline(); ok {
			cause = fmt.Sprintf("no answer before the plugin's deadline (%s)", dl.Format("15:04:05.000"))
		}
	}
	return fmt.Sprintf("sluice %s: sluice-agent at %s is not available: %s", verb, a.socket, cause)
}

// encodeError is a request that cannot be encoded: a string from the
// runtime (CNI_ARGS, the container id) that is not UTF-8.
type encodeError struct{ err error }

func (e *encodeError) Error() string {
	return "cannot encode the request to sluice-agent: " + e.err.Error()
}

// oversizeError is a request the agent would refuse for its size: the
// network config or prevResult is too large. Retrying cannot help.
type oversizeError struct{ size int }

func (e *oversizeError) Error() string {
	return fmt.Sprintf("the request to sluice-agent is %d bytes, more than its limit of %d: the network config or prevResult is too large", e.size, pluginconf.MaxRequestBytes)
}

// reachable reports whether an error means the agent could not be asked at
// all (as opposed to answering with a refusal).
func reachable(err error) bool {
	switch grpccall.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled:
		return false
	}
	return true
}

// newRequestID tags one CNI call; the plugin and the agent both log it.
func newRequestID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
