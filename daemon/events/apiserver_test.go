//go:build !noapiserver

// The real kube-apiserver tier: compiled out by -tags noapiserver, which
// the non-root unit run uses (it ran as root in the same `make test`).

package events

import (
	"context"
	"os"
	"strconv"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/sluicemesh/sluice/test/harness/kubetest"
)

const (
	// agent is the identity the recorder runs as: bound to the shipped
	// ClusterRole and nothing else.
	agent    = "sluice-agent"
	rbacFile = "../../deploy/rbac/clusterrole.yaml"
)

// shared starts the API server on first use, with the agent bound to its
// shipped ClusterRole.
var shared = &kubetest.Shared{User: agent, RBACFile: rbacFile}

func TestMain(m *testing.M) {
	code := m.Run()
	shared.Stop()
	os.Exit(code)
}

var nsSeq atomic.Int64

// The shipped ClusterRole is enough for the recorder: it creates Events
// and patches their count as the agent, and nothing fails.
func TestRecorderRBAC(t *testing.T) {
	e := shared.Get(t)
	admin := kubernetes.NewForConfigOrDie(e.AdminConfig())
	name := "ev" + strconv.FormatInt(nsSeq.Add(1), 10)
	if _, err := admin.CoreV1().Namespaces().Create(context.Background(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace %s: %v", name, err)
	}
	testCountsRepeats(t, kubernetes.NewForConfigOrDie(e.Config(agent)), admin, name)
}
