package kubetest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
)

// Shipped is what InstallShipped created from the rendered manifests: the
// agent's ServiceAccount, and each admission policy binding by name (a
// test deletes one to take its fence away).
type Shipped struct {
	SA       *corev1.ServiceAccount
	Bindings map[string]*admissionv1.ValidatingAdmissionPolicyBinding
}

// Binding is the policy binding whose name ends in suffix ("-startup-taint",
// "-node-condition"), or nil.
func (s Shipped) Binding(suffix string) *admissionv1.ValidatingAdmissionPolicyBinding {
	for name, b := range s.Bindings {
		if strings.HasSuffix(name, suffix) {
			return b
		}
	}
	return nil
}

// InstallShipped creates the ServiceAccount, ClusterRole, its binding, and
// every ValidatingAdmissionPolicy and binding of the manifests at path (the
// chart rendered with its defaults, deploy/manifests/sluice.yaml), so a test
// runs the agent with exactly what ships. Other kinds are skipped.
func InstallShipped(admin kubernetes.Interface, path string) (Shipped, error) {
	ctx := context.Background()
	b, err := os.ReadFile(path)
	if err != nil {
		return Shipped{}, err
	}
	out := Shipped{Bindings: map[string]*admissionv1.ValidatingAdmissionPolicyBinding{}}
	var roles, policies int
	d := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(b)))
	for {
		doc, err := d.Read()
		if errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return Shipped{}, fmt.Errorf("read %s: %w", path, err)
		}
		if len(bytes.TrimSpace(stripComments(doc))) == 0 {
			continue
		}
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(doc, nil, nil)
		if err != nil {
			return Shipped{}, fmt.Errorf("decode %s: %w", path, err)
		}
		switch o := obj.(type) {
		case *corev1.ServiceAccount:
			out.SA, err = admin.CoreV1().ServiceAccounts(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.ClusterRole:
			roles++
			_, err = admin.RbacV1().ClusterRoles().Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.ClusterRoleBinding:
			roles++
			_, err = admin.RbacV1().ClusterRoleBindings().Create(ctx, o, metav1.CreateOptions{})
		case *admissionv1.ValidatingAdmissionPolicy:
			policies++
			_, err = admin.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, o, metav1.CreateOptions{})
		case *admissionv1.ValidatingAdmissionPolicyBinding:
			out.Bindings[o.Name] = o.DeepCopy()
			_, err = admin.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, o, metav1.CreateOptions{})
		default:
			continue
		}
		if err != nil {
			return Shipped{}, fmt.Errorf("create the shipped %T: %w", obj, err)
		}
	}
	if out.SA == nil || roles != 2 || policies == 0 || policies != len(out.Bindings) {
		return Shipped{}, fmt.Errorf("%s: installed a ServiceAccount %v, %d of the ClusterRole and its binding, %d policies and %d bindings",
			path, out.SA != nil, roles, policies, len(out.Bindings))
	}
	return out, nil
}

// stripComments drops comment lines, so a document of only comments is
// seen as empty.
func stripComments(doc []byte) []byte {
	var out []byte
	for _, l := range bytes.Split(doc, []byte("\n")) {
		if !bytes.HasPrefix(bytes.TrimSpace(l), []byte("#")) {
			out = append(append(out, l...), '\n')
		}
	}
	return out
}

// AgentOn creates a pod of sa on node (which must exist) and returns a
// client with that pod's bound token, as the kubelet mounts it: the
// agent's identity, its node's name in the token
// (authentication.kubernetes.io/node-name, which the shipped policies read).
func (e *Env) AgentOn(t testing.TB, admin kubernetes.Interface, sa *corev1.ServiceAccount, node string) kubernetes.Interface {
	t.Helper()
	ctx := context.Background()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "agent-" + node, Namespace: sa.Namespace},
		Spec: corev1.PodSpec{NodeName: node, ServiceAccountName: sa.Name,
			Containers: []corev1.Container{{Name: "agent", Image: "sluice"}}},
	}
	pod, err := admin.CoreV1().Pods(sa.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := admin.CoreV1().ServiceAccounts(sa.Namespace).CreateToken(ctx, sa.Name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{BoundObjectRef: &authenticationv1.BoundObjectReference{
			Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("a token bound to pod %s: %v", pod.Name, err)
	}
	cfg := &rest.Config{Host: e.AdminConfig().Host, BearerToken: tr.Status.Token, TLSClientConfig: rest.TLSClientConfig{Insecure: true}}
	agent := kubernetes.NewForConfigOrDie(cfg)
	review, err := agent.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := review.Status.UserInfo.Extra["authentication.kubernetes.io/node-name"]; len(got) != 1 || got[0] != node {
		t.Fatalf("the agent's token names node %v, want [%s]", got, node)
	}
	return agent
}
