package rpc

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	sluicev1 "github.com/sluicemesh/sluice/api/sluice/v1"
	"github.com/sluicemesh/sluice/daemon/ambientmesh"
	"github.com/sluicemesh/sluice/daemon/policy"
	"github.com/sluicemesh/sluice/daemon/redirect"
	"github.com/sluicemesh/sluice/daemon/redirect/kernel"
	"github.com/sluicemesh/sluice/daemon/redirection"
	"github.com/sluicemesh/sluice/daemon/workloads"
	"github.com/sluicemesh/sluice/test/harness/kubetest"
	"github.com/sluicemesh/sluice/test/harness/nstest"
)

// An ambient ADD whose ambient.istio.io/redirection patch the API server
// denies fails, as Istio's does, and leaves nothing behind: running, the
// pod would be a Ready endpoint istiod sends plaintext, which its STRICT
// peers' ztunnel refuses. Once the patch is allowed the retried ADD
// enrols the pod and marks it. Against a real kube-apiserver with RBAC.
func TestAmbientAddFailsWhenTheRedirectionPatchIsDenied(t *testing.T) {
	nstest.RequireRoot(t)
	const user = "sluice-agent"
	e := kubetest.Start(t, user)
	admin := kubernetes.NewForConfigOrDie(e.AdminConfig())
	ctx := context.Background()
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod, err := admin.CoreV1().Pods("shop").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "amb"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	host := nstest.New(t, "host")
	h := host.Handle(t)
	if err := (kernel.Netlink{}).EnsureHostTable(redirect.Netns(h), redirect.DefaultHostConfig()); err != nil {
		t.Fatal(err)
	}
	zt := &fakeZtunnel{}
	f := newCNIFixtureWith(t, t.TempDir(), &workloads.Ambient{Ztunnel: zt, Host: h})
	f.cni.Policy = &policy.Static{Spec: redirect.DefaultAmbientSpec()}
	f.cni.Ambient = &ambientmesh.Mesh{Store: f.store, Redirection: redirection.New(kubernetes.NewForConfigOrDie(e.Config(user)), slog.New(slog.DiscardHandler))}
	ns := nstest.NewIn(t, f.root, "c1")
	add := func() error {
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_, err := f.cni.Add(actx, &sluicev1.AddRequest{ApiVersion: sluicev1.ApiVersion_API_VERSION_2, ContainerId: "c1",
			Netns: ns.Path, IfName: "eth0", Pod: &sluicev1.PodRef{Namespace: "shop", Name: "amb", Uid: string(pod.UID)},
			Ips: []*sluicev1.IPConfig{{Address: "10.1.0.2/24"}}, Config: &sluicev1.PluginConfig{NetworkName: "net-a"}})
		return err
	}

	err = add()
	if code(err) != codes.Unavailable {
		t.Fatalf("ambient ADD with the redirection patch denied: %v (code %v), want Unavailable", err, code(err))
	}
	if len(f.store.List()) != 0 || ns.Command("nft", "list", "table", "inet", "sluice").Run() == nil {
		t.Fatal("the failed ADD left its enrolment behind")
	}

	grant(t, admin, user)
	nstest.Eventually(t, 30*time.Second, func() bool { return add() == nil }, "the retried ADD to succeed once the patch is allowed")
	got, err := admin.CoreV1().Pods("shop").Get(ctx, "amb", metav1.GetOptions{})
	if err != nil || got.Annotations[redirection.Annotation] != "enabled" {
		t.Fatalf("pod annotations %v (%v), want %s=enabled", got.Annotations, err, redirection.Annotation)
	}
}

// grant lets user patch pods/status, as the agent's ClusterRole does.
func grant(t *testing.T, admin kubernetes.Interface, user string) {
	t.Helper()
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
