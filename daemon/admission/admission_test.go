package admission

import (
	"errors"
	"fmt"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestDeniedBy(t *testing.T) {
	const fence = "sluice-agent may change nothing of a node but its startup taint"
	nodes := schema.GroupResource{Resource: "nodes"}
	policy := apierrors.NewInvalid(schema.GroupKind{Kind: "Node"}, "n1", nil)
	policy.ErrStatus.Message = `nodes "n1" is forbidden: ValidatingAdmissionPolicy 'sluice-startup-taint' with binding 'sluice-startup-taint' denied request: ` + fence
	other := apierrors.NewForbidden(nodes, "n1", errors.New("ValidatingAdmissionPolicy 'x' with binding 'x' denied request: something else"))
	rbac := apierrors.NewForbidden(nodes, "n1", errors.New(`User "system:serviceaccount:x:y" cannot patch resource "nodes"`))
	webhook := apierrors.NewForbidden(nodes, "n1", errors.New("admission webhook denied request: "+fence))
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"the policy's own message", policy, true},
		{"wrapped", fmt.Errorf("patch: %w", policy), true},
		{"another policy", other, false},
		{"RBAC", rbac, false},
		{"a webhook with the same words", webhook, false},
		{"not an API status", errors.New("denied request: " + fence), false},
		{"nil", nil, false},
	} {
		if got := DeniedBy(c.err, fence); got != c.want {
			t.Errorf("%s: DeniedBy = %v, want %v", c.name, got, c.want)
		}
	}
}
