package events

import "testing"

// The recorder's logic (what each Event says, counting repeats, the
// flush at shutdown) runs on client-go's fake clientset here, as non-root
// in milliseconds; apiserver_test.go holds the one test that needs a real
// kube-apiserver: that the shipped ClusterRole lets the agent do it.

const node = "node-a"

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(string(p))
	return len(p), nil
}
