package redirection

import (
	"context"
	"os"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/sluicemesh/sluice/daemon/policy"
	"github.com/sluicemesh/sluice/test/harness/nstest"
	"github.com/sluicemesh/sluice/test/harness/podtest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	podtest.Stop()
	os.Exit(code)
}

// statusOnly is a client impersonating user, who may patch pods/status
// (when granted) and nothing else: proof the annotation goes through the
// status subresource, the lower privilege Istio uses.
func statusOnly(t *testing.T, user string, grant bool) (kubernetes.Interface, func()) {
	t.Helper()
	e, admin := podtest.Kube(t)
	cfg := rest.CopyConfig(e.AdminConfig())
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	grantFn := func() {
		ctx := context.Background()
		role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: user},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods/status"}, Verbs: []string{"patch"}}}}
		if _, err := admin.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		b := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: user},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: user},
			Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}}}
		if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, b, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if grant {
		grantFn()
	}
	return kubernetes.NewForConfigOrDie(cfg), grantFn
}

func redirectionOf(t *testing.T, c kubernetes.Interface, ns, name string) (string, bool) {
	t.Helper()
	p, err := c.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	v, ok := p.Annotations[Annotation]
	return v, ok
}

func TestRedirectionPatchesPodStatus(t *testing.T) {
	a := podtest.Start(t)
	_, admin := podtest.Kube(t)
	ns := podtest.Namespace(t, admin)
	pod := a.CreatePod(t, admin, ns, "amb", false)
	client, _ := statusOnly(t, "redirection-status-"+ns, true)
	r := New(client, podtest.Log(t))
	ref := policy.Pod{Namespace: ns, Name: pod.Name, UID: string(pod.UID)}
	// The authorizer learns a new binding a moment later: wait for it
	// through Set itself, which reports nothing but patches once allowed.
	nstest.Eventually(t, 30*time.Second, func() bool {
		r.Set(context.Background(), ref, "enabled")
		v, _ := redirectionOf(t, admin, ns, pod.Name)
		return v == "enabled"
	}, "pod never annotated %s=enabled through pods/status", Annotation)
	r.Set(context.Background(), ref, "")
	if v, ok := redirectionOf(t, admin, ns, pod.Name); ok {
		t.Fatalf("annotation not removed: %q", v)
	}
	// A pod recreated under the name (another uid) is never marked.
	stale := ref
	stale.UID = "00000000-0000-0000-0000-000000000000"
	r.Set(context.Background(), stale, "enabled")
	if v, ok := redirectionOf(t, admin, ns, pod.Name); ok {
		t.Fatalf("a patch for another uid annotated the pod: %q", v)
	}
	r.mu.Lock()
	left := len(r.want)
	r.mu.Unlock()
	if left != 0 {
		t.Fatalf("%d patches left to retry after a uid mismatch", left)
	}
}

// A patch that fails (here: not yet allowed) is retried on a timer until
// it sticks, not only when the pod changes. The backoff is capped at a
// second: the authorizer learns the grant when it does, and by then the
// default backoff (doubling to 30s) may have grown past any deadline.
func TestRedirectionRetriesFailedPatch(t *testing.T) {
	a := podtest.Start(t)
	_, admin := podtest.Kube(t)
	ns := podtest.Namespace(t, admin)
	pod := a.CreatePod(t, admin, ns, "amb", false)
	client, grant := statusOnly(t, "redirection-retry-"+ns, false)
	r := newAnnotator(client, podtest.Log(t), time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	r.Set(ctx, policy.Pod{Namespace: ns, Name: pod.Name, UID: string(pod.UID)}, "enabled")
	if _, ok := redirectionOf(t, admin, ns, pod.Name); ok {
		t.Fatal("patched without permission")
	}
	grant()
	nstest.Eventually(t, 60*time.Second, func() bool {
		v, _ := redirectionOf(t, admin, ns, pod.Name)
		return v == "enabled"
	}, "a failed patch was never retried")
}
