package kubetest

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

var env *Env

// seq makes names unique across -count repetitions, which share one Env.
var seq atomic.Int64

func unique(prefix string) string {
	return prefix + "-" + strconv.FormatInt(seq.Add(1), 10)
}

// nobody is a user no role is bound to.
const nobody = "nobody"

func TestMain(m *testing.M) {
	e, stop, err := StartMain(nobody)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kubetest:", err)
		os.Exit(1)
	}
	env = e
	code := m.Run()
	stop()
	os.Exit(code)
}

func clientFor(t *testing.T, user string) *kubernetes.Clientset {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", env.Kubeconfig(t, user))
	if err != nil {
		t.Fatalf("load kubeconfig of %s: %v", user, err)
	}
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatalf("client for %s: %v", user, err)
	}
	return c
}

func testPod(ns, name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PodSpec{
			NodeName:   "node-a",
			Containers: []corev1.Container{{Name: "app", Image: "example.invalid/app:1"}},
		},
	}
}

func TestCreateAndGet(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := clientFor(t, Admin)
	name := unique("smoke")
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if _, err := c.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	if _, err := c.CoreV1().Pods(name).Create(ctx, testPod(name, "p"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod: %v", err)
	}
	got, err := c.CoreV1().Pods(name).Get(ctx, "p", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get pod: %v", err)
	}
	if got.Spec.NodeName != "node-a" || got.UID == "" {
		t.Errorf("pod = node %q uid %q, want node-a and a uid", got.Spec.NodeName, got.UID)
	}
}

func TestRBACDeniesUnboundUser(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := clientFor(t, nobody).CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
	if !apierrors.IsForbidden(err) {
		t.Fatalf("list pods as %s: got %v, want Forbidden", nobody, err)
	}
}

func TestRestartKeepsState(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := clientFor(t, Admin)
	name := unique("restart")
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if _, err := c.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	env.StopAPIServer()
	if _, err := c.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{}); err == nil {
		t.Fatal("get namespace with the API server stopped: succeeded")
	}
	if err := env.StartAPIServer(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{}); err != nil {
		t.Fatalf("get namespace after restart: %v", err)
	}
}

func TestAddUserAfterStart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	late := unique("late")
	if err := env.AddUser(late, "system:masters"); err != nil {
		t.Fatal(err)
	}
	if _, err := clientFor(t, late).CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{}); err != nil {
		t.Fatalf("get namespace as a user added after start: %v", err)
	}
}
