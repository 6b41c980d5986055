package sysdump

import (
	"strings"
	"testing"
)

// Each input holds a secret the bundle must not carry, in a form it meets
// on a node: env, flags, JSON, YAML, logfmt, HTTP headers, URLs, PEM, JWT.
func TestRedactRemovesSecrets(t *testing.T) {
	const jwt = "eyJhbGciOiJSUzI1NiIsImtpZCI6IjEifQ.eyJpc3MiOiJrdWJlcm5ldGVzIn0.c2lnbmF0dXJlLXBhcnQ"
	for _, tc := range []struct{ in, secret string }{
		{"SLUICE_E2E_TOKEN=hunter2-env\n", "hunter2-env"},
		{"API_KEY=abc123 other=1\n", "abc123"},
		{"--bootstrap-token=t0ken-flag --x=1", "t0ken-flag"},
		{`{"password": "p@ss \"quoted\" word"}`, "p@ss"},
		{`{"password": "p@ss \"quoted\" word"}`, "quoted"},
		{"users:\n- name: a\n  user:\n    token: yaml-token-value\n", "yaml-token-value"},
		{"    client-key-data: LS0tLS1CRUdJTiBSU0Eg\n", "LS0tLS1CRUdJTiBSU0Eg"},
		{"db_password: two words here\n", "two words here"},
		{"level=INFO msg=x secret=s3cr3t mode=sidecar\n", "s3cr3t"},
		{"Authorization: Bearer abcdef.ghijkl\n", "abcdef.ghijkl"},
		{"curl -H 'X: Bearer zzzzzzzz1234'", "zzzzzzzz1234"},
		{"proxy https://user:pa55w0rd@example.invalid/x", "pa55w0rd"},
		{"sa " + jwt + " end", jwt[40:]},
		{"-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA\n-----END RSA PRIVATE KEY-----\n", "MIIEpAIBAAKCAQEA"},
		{"-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIcut", "MHcCAQEEIcut"}, // cut by a size cap
		{"'session_cookie': 'yum-cookie'", "yum-cookie"},
		{"Cookie: id=yum-header; theme=x\n", "yum-header"},
	} {
		out, n := Redact([]byte(tc.in))
		if strings.Contains(string(out), tc.secret) || n == 0 {
			t.Errorf("Redact(%q) = %q (%d redactions): %q survives", tc.in, out, n, tc.secret)
		}
	}
}

// What the bundle is for stays readable: rulesets, metrics, flags without
// secrets, journal records.
func TestRedactKeepsTheRest(t *testing.T) {
	for _, in := range []string{
		"table inet sluice {\n\tchain output {\n\t\tmeta skuid 1337 return\n\t\ttcp dport != 15008 redirect to :15001\n\t}\n}\n",
		"sluice_cni_requests_total{code=\"OK\",verb=\"Add\"} 3\n",
		"--kubeconfig=in-cluster\t(command line)\n--state-dir=/var/run/sluice/state\t(default)\n",
		`{"containerID":"cafe","ifName":"eth0","netns":"/proc/1/ns/net","netnsCookie":4097,"mode":"sidecar"}`,
		"level=INFO msg=\"pod enrolled\" pod=shop/cart mode=sidecar\n",
	} {
		if out, n := Redact([]byte(in)); string(out) != in || n != 0 {
			t.Errorf("Redact(%q) = %q, %d redactions; want it unchanged", in, out, n)
		}
	}
}

func TestSecretName(t *testing.T) {
	for name, want := range map[string]bool{
		"SLUICE_E2E_TOKEN": true, "AWS_SECRET_ACCESS_KEY": true, "DB_PASSWORD": true, "api-key": true,
		"SLUICE_STATE_DIR": false, "NODE_NAME": false, "kubeconfig": false, "health-addr": false,
	} {
		if got := SecretName(name); got != want {
			t.Errorf("SecretName(%q) = %v, want %v", name, got, want)
		}
	}
}

func TestSecretFileLeavesOutCredentials(t *testing.T) {
	for _, tc := range []struct {
		name, data string
		secret     bool
	}{
		{"ZZZ-istio-cni-kubeconfig", "{}", true},
		{"calico-kubeconfig", "", true},
		{"token", "x", true},
		{"client.key", "x", true},
		{"config", "apiVersion: v1\nkind: Config\nusers:\n- name: u\n", true},
		{"notes.txt", "-----BEGIN PRIVATE KEY-----\nabc\n-----END PRIVATE KEY-----\n", true},
		{"notes.txt", "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJzIn0.sig", true},
		{"10-bridge.conflist", `{"cniVersion":"1.0.0","plugins":[{"type":"sluice"}]}`, false},
		{"abcd:eth0.json", `{"containerID":"abcd"}`, false},
	} {
		if got := SecretFile(tc.name, []byte(tc.data)) != ""; got != tc.secret {
			t.Errorf("SecretFile(%q, %q) left out = %v, want %v", tc.name, tc.data, got, tc.secret)
		}
	}
}
