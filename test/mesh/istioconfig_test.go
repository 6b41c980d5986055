package mesh

import (
	"context"
	"encoding/json"
	"testing"
)

// istioObject creates an Istio config object (group security.istio.io,
// version v1) of the plural kind in ns from its spec, and returns a func
// that deletes it (also run at cleanup; deleting twice is harmless).
func istioObject(t *testing.T, ns, plural, kind, name string, spec any) (remove func()) {
	t.Helper()
	obj := map[string]any{
		"apiVersion": "security.istio.io/v1",
		"kind":       kind,
		"metadata":   map[string]any{"name": name, "namespace": ns},
		"spec":       spec,
	}
	body, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	path := "/apis/security.istio.io/v1/namespaces/" + ns + "/" + plural
	rc := client(t).CoreV1().RESTClient()
	if err := rc.Post().AbsPath(path).Body(body).SetHeader("Content-Type", "application/json").Do(t.Context()).Error(); err != nil {
		t.Fatalf("create %s %s/%s: %v", kind, ns, name, err)
	}
	remove = func() {
		_ = rc.Delete().AbsPath(path, name).Do(context.Background()).Error()
	}
	t.Cleanup(remove)
	return remove
}
