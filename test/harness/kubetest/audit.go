package kubetest

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// auditPolicy logs every request once it is answered (a watch also when
// it starts, so one still open is seen), at the Metadata level: who asked,
// the verb, the resource, the status; never a body.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
`

func (e *Env) auditPath() string { return filepath.Join(e.dir, "audit.log") }

func (e *Env) auditArgs() ([]string, error) {
	if !e.audit {
		return nil, nil
	}
	policy := filepath.Join(e.dir, "audit-policy.yaml")
	if err := os.WriteFile(policy, []byte(auditPolicy), 0o600); err != nil {
		return nil, fmt.Errorf("write audit policy: %w", err)
	}
	// Blocking mode: an event is on disk when its request is answered,
	// so a test counting right after its calls misses none.
	return []string{"--audit-policy-file=" + policy, "--audit-log-path=" + e.auditPath(),
		"--audit-log-format=json", "--audit-log-mode=blocking", "--audit-log-maxsize=0"}, nil
}

// AuditEvent is one request as the API server's audit log has it.
type AuditEvent struct {
	Stage     string `json:"stage"`
	Verb      string `json:"verb"`
	URI       string `json:"requestURI"`
	UserAgent string `json:"userAgent"`
	User      struct {
		Username string `json:"username"`
	} `json:"user"`
	ObjectRef *struct {
		Resource    string `json:"resource"`
		Namespace   string `json:"namespace"`
		Name        string `json:"name"`
		Subresource string `json:"subresource"`
	} `json:"objectRef"`
	Status *struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
}

// Resource is the event's resource, with its subresource after a slash
// ("pods/status"), or "" for a non-resource URL.
func (a AuditEvent) Resource() string {
	if a.ObjectRef == nil {
		return ""
	}
	if a.ObjectRef.Subresource != "" {
		return a.ObjectRef.Resource + "/" + a.ObjectRef.Subresource
	}
	return a.ObjectRef.Resource
}

// Audit reads the audit log (Options.Audit): every request answered so
// far, and every watch started so far (stage ResponseStarted), once each.
func (e *Env) Audit() ([]AuditEvent, error) {
	if !e.audit {
		return nil, fmt.Errorf("read audit log: the Env was started without Options.Audit")
	}
	f, err := os.Open(e.auditPath())
	if err != nil {
		return nil, fmt.Errorf("read audit log: %w", err)
	}
	defer f.Close()
	var out []AuditEvent
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		var ev AuditEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return nil, fmt.Errorf("read audit log: %w", err)
		}
		// A watch is counted when it starts; any other request when it
		// is answered.
		if (ev.Verb == "watch" && ev.Stage == "ResponseStarted") || (ev.Verb != "watch" && ev.Stage == "ResponseComplete") {
			out = append(out, ev)
		}
	}
	return out, sc.Err()
}
