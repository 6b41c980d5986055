package deploy

import (
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// TestAgentAcceptsDaemonSetCommandLine runs the real sluice-agent with
// exactly the args and env the rendered DaemonSet gives its container
// (downward-API values resolved as the kubelet would) plus --check-config.
// A flag the chart passes that the agent does not know, or a value it
// refuses, fails here.
func TestAgentAcceptsDaemonSetCommandLine(t *testing.T) {
	for _, vs := range valueSets {
		t.Run(vs.name, func(t *testing.T) {
			t.Parallel()
			ds := render(t, vs).daemonSet(t)
			out, err := checkConfig(t, ds)
			if err != nil || strings.TrimSpace(out) != "config ok" {
				t.Errorf("sluice-agent --check-config: %v\n%s", err, out)
			}
		})
	}
}

// TestAgentCheckCatchesDrift shows the check above has teeth: a value the
// agent refuses makes it fail, in one line naming the flag or variable (a
// crash-looping pod's log shows that line, not the usage). A flag the agent
// lacks fails earlier, at helm time (TestSchemaRejects).
func TestAgentCheckCatchesDrift(t *testing.T) {
	for name, tc := range map[string]struct{ values, names string }{
		"refused value": {"extraArgs: [--uninstall-on-exit=sometimes]\n", "--uninstall-on-exit"},
		"bad value":     {"extraArgs: [--max-inflight=many]\n", "-max-inflight"},
		"bad env":       {"extraEnv: [{name: SLUICE_MAX_INFLIGHT, value: many}]\n", "SLUICE_MAX_INFLIGHT"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ds := render(t, valueSet{name: "drift", namespace: "kube-system", values: tc.values}).daemonSet(t)
			out, err := checkConfig(t, ds)
			if err == nil {
				t.Fatalf("sluice-agent accepted %s:\n%s", strings.TrimSpace(tc.values), out)
			}
			if lines := strings.Count(strings.TrimSpace(out), "\n") + 1; lines != 1 || !strings.Contains(out, tc.names) {
				t.Errorf("%s: %d lines, want one naming %s:\n%s", strings.TrimSpace(tc.values), lines, tc.names, out)
			}
		})
	}
	out, err := exec.Command(agentBin, "--no-such-flag=1", "--check-config").CombinedOutput()
	if lines := strings.Count(strings.TrimSpace(string(out)), "\n") + 1; err == nil || lines != 1 || !strings.Contains(string(out), "-no-such-flag") {
		t.Errorf("an unknown flag: %v, %d lines, want one naming it:\n%s", err, lines, out)
	}
}

// checkConfig runs the agent as the kubelet would start the container,
// with --check-config appended, and returns its combined output.
func checkConfig(t *testing.T, ds *appsv1.DaemonSet) (string, error) {
	t.Helper()
	c := ds.Spec.Template.Spec.Containers[0]
	if len(c.Command) == 0 {
		t.Fatal("container has no command")
	}
	env := containerEnv(t, ds, c)
	var args []string
	for _, a := range append(slices.Clone(c.Command[1:]), c.Args...) {
		args = append(args, expand(a, env))
	}
	cmd := exec.Command(agentBin, append(args, "--check-config")...)
	cmd.Env = env // and nothing of the test's own
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// expand replaces $(NAME) in a container argument with the env var's value,
// as the kubelet does.
func expand(arg string, env []string) string {
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		arg = strings.ReplaceAll(arg, "$("+k+")", v)
	}
	return arg
}

// containerEnv resolves the container's env as the kubelet would for a pod
// of ds on node-1.
func containerEnv(t *testing.T, ds *appsv1.DaemonSet, c corev1.Container) []string {
	t.Helper()
	fields := map[string]string{
		"spec.nodeName":      "node-1",
		"metadata.name":      ds.Name + "-x7k2p",
		"metadata.namespace": ds.Namespace,
		"status.hostIP":      "10.0.0.11",
	}
	if len(c.EnvFrom) > 0 {
		t.Fatalf("envFrom %+v: resolve it here before using it", c.EnvFrom)
	}
	var env []string
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env = append(env, e.Name+"="+e.Value)
		case e.ValueFrom.FieldRef != nil:
			v, ok := fields[e.ValueFrom.FieldRef.FieldPath]
			if !ok {
				t.Fatalf("env %s: no test value for fieldRef %s", e.Name, e.ValueFrom.FieldRef.FieldPath)
			}
			env = append(env, e.Name+"="+v)
		case e.ValueFrom.ResourceFieldRef != nil && e.ValueFrom.ResourceFieldRef.Resource == "limits.memory":
			env = append(env, e.Name+"="+strconv.FormatInt(c.Resources.Limits.Memory().Value(), 10))
		default:
			t.Fatalf("env %s: cannot resolve %+v", e.Name, e.ValueFrom)
		}
	}
	return env
}
