package controlplane

import (
	"context"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluicemesh/sluice/daemon/redirection"
)

// State is what a scenario asserts about one pod: the kernel as nft text,
// what the API server holds, and what ztunnel and the journal hold.
type State struct {
	// Ruleset is sluice's table in the pod's netns as nft text; "" none.
	Ruleset string
	// Istio is istio-cni's capture left in the netns ("none" when gone).
	Istio string
	// Redirection is the ambient.istio.io/redirection annotation; "" unset.
	Redirection string
	// Events are the reasons of the Events recorded on the pod, sorted
	// (read after Flush: the recorder sends in the background).
	Events []string
	// Ztunnel: ztunnel holds the pod. Journaled: the store has a record.
	Ztunnel, Journaled bool
}

// Out reads the State of pod p whose netns is at path.
func (n *Node) Out(t *testing.T, p Pod, path string) State {
	t.Helper()
	ino := n.Netns.Inode(path)
	var s State
	if rs, ok := n.Kernel.Table(ino); ok {
		s.Ruleset = rs.Render()
	}
	s.Istio = n.Istio.Capture(ino).String()
	s.Redirection = n.Get(t, p).Annotations[redirection.Annotation]
	s.Ztunnel = n.Ztunnel.Holds(string(p.UID()))
	for _, r := range n.Store.List() {
		s.Journaled = s.Journaled || r.PodUID == string(p.UID())
	}
	l, err := n.Client.CoreV1().Events(p.Namespace).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range l.Items {
		if ev.InvolvedObject.UID == p.UID() {
			s.Events = append(s.Events, ev.Reason)
		}
	}
	slices.Sort(s.Events)
	return s
}

// Want is what a row expects of a pod's State in the checks every
// control-plane test makes; Expect compares them.
type Want struct {
	Rules       string // a golden's name (Golden); "" no table
	Redirection string
	Ztunnel     bool
	Events      []string
}

// Expect reports each way s differs from w.
func (s State) Expect(t *testing.T, w Want) {
	t.Helper()
	if want := Golden(t, w.Rules); s.Ruleset != want {
		t.Errorf("ruleset:\n%s\nwant:\n%s", s.Ruleset, want)
	}
	if s.Redirection != w.Redirection {
		t.Errorf("redirection annotation %q, want %q", s.Redirection, w.Redirection)
	}
	if s.Ztunnel != w.Ztunnel {
		t.Errorf("ztunnel holds the pod: %v, want %v", s.Ztunnel, w.Ztunnel)
	}
	if !slices.Equal(s.Events, w.Events) {
		t.Errorf("events %v, want %v", s.Events, w.Events)
	}
}
