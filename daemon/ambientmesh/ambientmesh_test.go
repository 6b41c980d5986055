package ambientmesh

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/sluicemesh/sluice/daemon/policy"
	"github.com/sluicemesh/sluice/daemon/workloads"
)

// fakeStore records the calls Add and Remove make, in order.
type fakeStore struct {
	calls    []string
	enrolErr error
	awaitErr error
	had      bool
	enrolled bool
}

func (s *fakeStore) EnrollAmbient(_ context.Context, r workloads.Record, wait bool) error {
	s.calls = append(s.calls, fmt.Sprintf("enroll %s wait=%v", r.ContainerID, wait))
	return s.enrolErr
}

func (s *fakeStore) AwaitZtunnel(_ context.Context, r workloads.Record) error {
	s.calls = append(s.calls, "await "+r.ContainerID)
	return s.awaitErr
}

func (s *fakeStore) Get(workloads.Attachment) (workloads.Record, bool) {
	return workloads.Record{}, s.had
}
func (s *fakeStore) PodEnrolled(string) bool { return s.enrolled }

func (s *fakeStore) Release(_ context.Context, a workloads.Attachment, _ string) error {
	s.calls = append(s.calls, "release "+a.ContainerID)
	return nil
}

// fakeAnnotator writes into the same call log; Apply fails with refuse.
type fakeAnnotator struct {
	log    *[]string
	refuse error
}

func (a fakeAnnotator) Set(_ context.Context, _ policy.Pod, v string) {
	*a.log = append(*a.log, "set "+v)
}

func (a fakeAnnotator) Apply(_ context.Context, _ policy.Pod, v string) error {
	*a.log = append(*a.log, "apply "+v)
	return a.refuse
}

func mesh(s *fakeStore, refuse error) *Mesh {
	return &Mesh{Store: s, Redirection: fakeAnnotator{log: &s.calls, refuse: refuse}}
}

var (
	pod = policy.Pod{Namespace: "ns", Name: "p", UID: "uid"}
	rec = workloads.Record{Attachment: workloads.Attachment{ContainerID: "c", IfName: "eth0"}, PodUID: "uid"}
)

func TestAddOrder(t *testing.T) {
	refused := errors.New("forbidden")
	for _, c := range []struct {
		name  string
		store fakeStore
		wait  Wait
		ann   error
		want  []string
		is    error
	}{
		{name: "ADD", wait: WaitForZtunnel, want: []string{"enroll c wait=true", "apply enabled"}},
		{name: "live", wait: NoWait, want: []string{"enroll c wait=false", "set enabled"}},
		{name: "ztunnel refused", store: fakeStore{enrolErr: fmt.Errorf("x: %w", ErrZtunnel)}, wait: WaitForZtunnel,
			want: []string{"enroll c wait=true", "set pending"}, is: ErrZtunnel},
		{name: "ztunnel refused a captured pod", store: fakeStore{enrolErr: ErrZtunnel, enrolled: true}, wait: NoWait,
			want: []string{"enroll c wait=false"}, is: ErrZtunnel},
		{name: "istiod not told", wait: WaitForZtunnel, ann: refused,
			want: []string{"enroll c wait=true", "apply enabled", "release c"}, is: ErrNotTold},
		{name: "istiod not told on a re-ADD", store: fakeStore{had: true}, wait: WaitForZtunnel, ann: refused,
			want: []string{"enroll c wait=true", "apply enabled"}, is: ErrNotTold},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := c.store
			err := mesh(&s, c.ann).Add(context.Background(), pod, rec, c.wait)
			if (c.is == nil) != (err == nil) || (c.is != nil && !errors.Is(err, c.is)) {
				t.Errorf("Add: %v, want %v", err, c.is)
			}
			if !slices.Equal(s.calls, c.want) {
				t.Errorf("calls %q, want %q", s.calls, c.want)
			}
		})
	}
}

func TestRemoveReleasesThenUnmarks(t *testing.T) {
	s := &fakeStore{}
	if err := mesh(s, nil).Remove(context.Background(), pod, []workloads.Record{rec}, true); err != nil {
		t.Fatal(err)
	}
	if want := []string{"release c", "set "}; !slices.Equal(s.calls, want) {
		t.Errorf("calls %q, want %q", s.calls, want)
	}
}

func TestNilMeshMarksNothing(t *testing.T) {
	var m *Mesh
	m.Mark(context.Background(), pod, "enabled")
}
