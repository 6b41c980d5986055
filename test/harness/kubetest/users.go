package kubetest

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// user is one line of the API server's --token-auth-file.
type user struct {
	token  string
	groups []string
}

// AddUser registers a token user with no permissions of its own beyond
// groups. The API server reads its token file only at start, so when it is
// running AddUser restarts it; register users up front with StartMain when
// that matters.
func (e *Env) AddUser(name string, groups ...string) error {
	e.mu.Lock()
	running := e.apiserver != nil
	err := e.addUsers([]string{name}, groups)
	if err == nil {
		err = e.writeTokens()
	}
	e.mu.Unlock()
	if err != nil || !running {
		return err
	}
	e.StopAPIServer()
	return e.StartAPIServer()
}

// addUsers gives each name a fresh random token. Callers hold e.mu or own
// e exclusively.
func (e *Env) addUsers(names, groups []string) error {
	for _, name := range names {
		if name == "" || strings.ContainsAny(name, ",\"\n") {
			return fmt.Errorf("add user %q: the name must be non-empty and fit a CSV field", name)
		}
		if _, ok := e.users[name]; ok {
			return fmt.Errorf("add user %q: already exists", name)
		}
		b := make([]byte, 16)
		if _, err := rand.Read(b); err != nil {
			return fmt.Errorf("add user %q: generate token: %w", name, err)
		}
		e.users[name] = user{token: hex.EncodeToString(b), groups: groups}
	}
	return nil
}

// writeTokens writes the token file in the format of --token-auth-file:
// token,user,uid,"group1,group2".
func (e *Env) writeTokens() error {
	names := make([]string, 0, len(e.users))
	for n := range e.users {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, n := range names {
		u := e.users[n]
		fmt.Fprintf(&b, "%s,%s,%s,\"%s\"\n", u.token, n, n, strings.Join(u.groups, ","))
	}
	path := filepath.Join(e.dir, "tokens.csv")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		return fmt.Errorf("write token file %s: %w", path, err)
	}
	return nil
}

// Config is a client config that authenticates as user. It panics on an
// unknown user: that is a bug in the test, not a condition to handle.
func (e *Env) Config(name string) *rest.Config {
	e.mu.Lock()
	u, ok := e.users[name]
	e.mu.Unlock()
	if !ok {
		panic(fmt.Sprintf("kubetest: no user %q; add it with StartMain or AddUser", name))
	}
	return &rest.Config{
		Host:            e.Host(),
		BearerToken:     u.token,
		TLSClientConfig: rest.TLSClientConfig{Insecure: true},
		// Tests create objects in bursts; client-side throttling would
		// only slow them down.
		QPS:   1000,
		Burst: 1000,
	}
}

// AdminConfig is Config(Admin).
func (e *Env) AdminConfig() *rest.Config {
	return e.Config(Admin)
}

// Kubeconfig writes a kubeconfig file for user under t's temp dir and
// returns its path, for code under test that takes --kubeconfig.
func (e *Env) Kubeconfig(t testing.TB, name string) string {
	t.Helper()
	cfg := e.Config(name)
	kc := clientcmdapi.NewConfig()
	kc.Clusters["kubetest"] = &clientcmdapi.Cluster{Server: cfg.Host, InsecureSkipTLSVerify: true}
	kc.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: cfg.BearerToken}
	kc.Contexts["kubetest"] = &clientcmdapi.Context{Cluster: "kubetest", AuthInfo: name}
	kc.CurrentContext = "kubetest"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatalf("write kubeconfig for %s: %v", name, err)
	}
	return path
}
