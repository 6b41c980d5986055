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

	"github.com/sluicemesh/sluice/internal/kubetest"
)

const (
	// agent is the identity the recorder runs as: bound to the shipped
	// ClusterRole and nothing else.
	agent    = "sluice-agent"
	rbacFile = "../../deploy/rbac/clusterrole.yaml"
	node     = "node-a"
)

// shared starts the API server on first use, so the pure tests never pay
// for it, with the agent bound to its shipped ClusterRole.
var shared = &kubetest.Shared{User: agent, RBACFile: rbacFile}

func TestMain(m *testing.M) {
	code := m.Run()
	shared.Stop()
	os.Exit(code)
}

// kube returns the agent's client and an admin client.
func kube(t *testing.T) (agentClient, admin kubernetes.Interface) {
	t.Helper()
	testEnv := shared.Get(t)
	return kubernetes.NewForConfigOrDie(testEnv.Config(agent)), kubernetes.NewForConfigOrDie(testEnv.AdminConfig())
}

var nsSeq atomic.Int64

func namespace(t *testing.T, c kubernetes.Interface) string {
	t.Helper()
	name := "ev" + strconv.FormatInt(nsSeq.Add(1), 10)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if _, err := c.CoreV1().Namespaces().Create(context.Background(), ns, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace %s: %v", name, err)
	}
	return name
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(string(p))
	return len(p), nil
}
