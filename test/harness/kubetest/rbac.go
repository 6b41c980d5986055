package kubetest

import (
	"context"
	"fmt"
	"os"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
)

// BindClusterRole creates the ClusterRole in file (YAML, as shipped) and
// binds user to it, so a test runs with exactly the permissions a
// deployment grants, not as admin.
func (e *Env) BindClusterRole(user, file string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := os.ReadFile(file)
	if err != nil {
		return fmt.Errorf("read ClusterRole: %w", err)
	}
	obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(b, nil, nil)
	if err != nil {
		return fmt.Errorf("decode %s: %w", file, err)
	}
	role, ok := obj.(*rbacv1.ClusterRole)
	if !ok {
		return fmt.Errorf("%s holds a %T, want a ClusterRole", file, obj)
	}
	c := kubernetes.NewForConfigOrDie(e.AdminConfig())
	if _, err := c.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create ClusterRole %s: %w", role.Name, err)
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: user},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
	}
	if _, err := c.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("bind ClusterRole %s to %s: %w", role.Name, user, err)
	}
	return nil
}
