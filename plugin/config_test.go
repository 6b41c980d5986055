package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/sluicemesh/sluice/internal/pluginconf"
)

const prevResult = `{"cniVersion":"1.0.0","interfaces":[{"name":"eth0","sandbox":"/var/run/netns/x"}],
 "ips":[{"address":"10.22.0.5/16","gateway":"10.22.0.1","interface":0}]}`

func TestParseConfig(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		check    func(*testing.T, *NetConf)
		wantErr  string
	}{
		{
			name: "defaults",
			in:   `{"cniVersion":"1.1.0","name":"k8s","type":"sluice"}`,
			check: func(t *testing.T, c *NetConf) {
				if c.parsed.Socket != pluginconf.DefaultSocket || c.parsed.Timeout != pluginconf.DefaultTimeout {
					t.Errorf("socket %q timeout %v", c.parsed.Socket, c.parsed.Timeout)
				}
				if c.PrevResult != nil {
					t.Error("prevResult set without one in the input")
				}
			},
		},
		{
			name: "all keys and a 0.3.1 prevResult",
			in: `{"cniVersion":"0.3.1","name":"k8s","type":"sluice","socket":"/run/s.sock","timeout":"500ms","logLevel":"debug",
			      "excludeNamespaces":["kube-system"],
			      "prevResult":{"cniVersion":"0.3.1","interfaces":[{"name":"eth0"}],"ips":[{"version":"4","address":"10.1.0.2/24","interface":0}]}}`,
			check: func(t *testing.T, c *NetConf) {
				if c.Socket != "/run/s.sock" || c.parsed.Timeout != 500*time.Millisecond || c.LogLevel != "debug" {
					t.Errorf("got %+v", c)
				}
				r, ok := c.PrevResult.(*current.Result)
				if !ok || len(r.IPs) != 1 || r.IPs[0].Address.String() != "10.1.0.2/24" {
					t.Errorf("prevResult = %#v", c.PrevResult)
				}
				if !c.excluded("kube-system") || c.excluded("default") || c.excluded("") {
					t.Error("excludeNamespaces not honoured")
				}
				if strings.Contains(string(c.raw), "prevResult") {
					t.Errorf("raw keeps prevResult: %s", c.raw)
				}
			},
		},
		{name: "garbage", in: `{"cniVersion":`, wantErr: "failed to parse network configuration"},
		{name: "relative socket", in: `{"cniVersion":"1.0.0","name":"n","socket":"agent.sock"}`, wantErr: "absolute"},
		{name: "bad timeout", in: `{"cniVersion":"1.0.0","name":"n","timeout":"soon"}`, wantErr: "timeout"},
		{name: "zero timeout", in: `{"cniVersion":"1.0.0","name":"n","timeout":"0s"}`, wantErr: "timeout"},
		{name: "huge timeout", in: `{"cniVersion":"1.0.0","name":"n","timeout":"1h"}`, wantErr: "timeout"},
		{name: "bad log level", in: `{"cniVersion":"1.0.0","name":"n","logLevel":"loud"}`, wantErr: "logLevel"},
		{name: "bad prevResult", in: `{"cniVersion":"1.0.0","name":"n","prevResult":{"ips":"no"}}`, wantErr: "prevResult"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := parseConfig([]byte(tc.in), true)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, c)
		})
	}
}

func TestParseArgs(t *testing.T) {
	a, err := parseArgs("IgnoreUnknown=1;K8S_POD_NAMESPACE=shop;K8S_POD_NAME=cart-7;K8S_POD_INFRA_CONTAINER_ID=abc;K8S_POD_UID=u-1")
	if err != nil {
		t.Fatal(err)
	}
	if a != (podArgs{Namespace: "shop", Name: "cart-7", UID: "u-1", InfraContainerID: "abc"}) {
		t.Errorf("got %+v", a)
	}
	if a, err := parseArgs(""); err != nil || a != (podArgs{}) {
		t.Errorf("empty: %+v %v", a, err)
	}
	for _, bad := range []string{"K8S_POD_NAME", "=x", "A=1;;B"} {
		if _, err := parseArgs(bad); err == nil {
			t.Errorf("parseArgs(%q) accepted", bad)
		}
	}
}

func FuzzParseConfig(f *testing.F) {
	f.Add([]byte(`{"cniVersion":"1.1.0","name":"k8s","type":"sluice","prevResult":` + prevResult + `}`))
	f.Add([]byte(`{"cniVersion":"0.3.1","name":"k8s","timeout":"1s","excludeNamespaces":["a"]}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		c, err := parseConfig(in, true)
		if err != nil {
			return
		}
		if c.parsed.Timeout <= 0 || c.parsed.Timeout > pluginconf.MaxTimeout || c.parsed.Socket == "" {
			t.Fatalf("accepted config with timeout %v socket %q", c.parsed.Timeout, c.parsed.Socket)
		}
		if !json.Valid(c.raw) {
			t.Fatalf("raw is not JSON: %q", c.raw)
		}
		if c.RawPrevResult != nil {
			if _, ok := c.PrevResult.(*current.Result); !ok {
				t.Fatalf("prevResult not converted: %T", c.PrevResult)
			}
		}
	})
}

func FuzzParseArgs(f *testing.F) {
	f.Add("K8S_POD_NAMESPACE=a;K8S_POD_NAME=b;K8S_POD_UID=c")
	f.Add("IgnoreUnknown=true")
	f.Fuzz(func(t *testing.T, in string) {
		a, err := parseArgs(in)
		if err != nil {
			return
		}
		for _, v := range []string{a.Namespace, a.Name, a.UID} {
			if strings.Contains(v, ";") {
				t.Fatalf("value %q spans pairs", v)
			}
		}
	})
}

func TestParseConfigWarns(t *testing.T) {
	c, err := parseConfig([]byte(`{"cniVersion":"1.0.0","name":"n","type":"sluice","sockett":"/x","prevResult":{"cniVersion":"1.0.0","ips":[]}}`), true)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(append(c.warnings, verbWarnings("ADD", c)...), "\n")
	for _, want := range []string{`unknown key "sockett"`, "prevResult has no IPs"} {
		if !strings.Contains(got, want) {
			t.Errorf("warnings %q lack %q", got, want)
		}
	}
	// On DEL the cached result of a non-chained sluice is empty by design.
	if w := verbWarnings("DEL", c); len(w) != 0 {
		t.Errorf("DEL warned: %q", w)
	}
	c, err = parseConfig([]byte(`{"cniVersion":"1.0.0","name":"n","type":"sluice","socket":"/x","prevResult":`+prevResult+`}`), true)
	if err != nil || len(c.warnings) != 0 {
		t.Errorf("clean config warned: %v %v", c.warnings, err)
	}
}

// libcni's GC sends valid attachments under both names; neither is a typo.
func TestParseConfigGCKeysNoWarning(t *testing.T) {
	c, err := parseConfig([]byte(`{"cniVersion":"1.1.0","name":"n","type":"sluice","socket":"/x","cni.dev/valid-attachments":[],"cni.dev/attachments":[]}`), true)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range c.warnings {
		if strings.Contains(w, "unknown key") {
			t.Errorf("GC config warned: %s", w)
		}
	}
}
