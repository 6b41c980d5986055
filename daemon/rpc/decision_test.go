package rpc

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	sluicev1 "github.com/sluicemesh/sluice/api/sluice/v1"
	"github.com/sluicemesh/sluice/daemon/events"
	"github.com/sluicemesh/sluice/daemon/policy"
	"github.com/sluicemesh/sluice/daemon/redirect"
)

type refusingPolicy struct{}

func (refusingPolicy) Decide(context.Context, policy.Pod) (policy.Decision, error) {
	return policy.Decision{}, errors.New("pod shop/cart: annotation broken")
}

// A refused ADD's message, which the runtime shows in the pod's events,
// carries the request id, and the agent logs the same id with the cause.
func TestRefusedAddCarriesRequestID(t *testing.T) {
	var log bytes.Buffer
	s := &CNI{Policy: refusingPolicy{}, Inflight: NewInflight(1),
		Decisions: events.NewDecisions(slog.New(slog.NewTextHandler(&log, nil)))}
	_, err := s.Add(context.Background(), &sluicev1.AddRequest{ApiVersion: sluicev1.ApiVersion_API_VERSION_2,
		ContainerId: "c1", IfName: "eth0", RequestId: "feedbeef", Pod: &sluicev1.PodRef{Namespace: "shop", Name: "cart"}})
	if err == nil || !strings.HasSuffix(err.Error(), "(sluice request_id feedbeef)") {
		t.Fatalf("err = %v, want it to end with the request id", err)
	}
	if !strings.Contains(log.String(), `msg="pod not started: capture could not be set up" pod=shop/cart container_id=c1 request_id=feedbeef`) {
		t.Errorf("decision log:\n%s", log.String())
	}
}

// A passed-through ADD is logged with its reason and counted.
func TestPassedThroughAddIsLogged(t *testing.T) {
	var log bytes.Buffer
	d := events.NewDecisions(slog.New(slog.NewTextHandler(&log, nil)))
	s := &CNI{Policy: passPolicy{}, Inflight: NewInflight(1), Decisions: d}
	resp, err := s.Add(context.Background(), &sluicev1.AddRequest{ApiVersion: sluicev1.ApiVersion_API_VERSION_2,
		ContainerId: "c2", IfName: "eth0", RequestId: "r2", Pod: &sluicev1.PodRef{Namespace: "kube-system", Name: "coredns"}})
	if err != nil || resp.Enrolled {
		t.Fatalf("Add = %v, %v", resp, err)
	}
	if !strings.Contains(log.String(), `msg="pod passed through" pod=kube-system/coredns container_id=c2 request_id=r2 reason="namespace kube-system is excluded" reason_code=excluded-namespace`) {
		t.Errorf("decision log:\n%s", log.String())
	}
	if got := d.PassedThrough()[events.PassExcludedNamespace]; got != 1 {
		t.Errorf("passed through excluded-namespace = %d, want 1", got)
	}
}

type passPolicy struct{}

func (passPolicy) Decide(_ context.Context, p policy.Pod) (policy.Decision, error) {
	return policy.Decision{Reason: "namespace " + p.Namespace + " is excluded", Spec: redirect.Spec{}}, nil
}
