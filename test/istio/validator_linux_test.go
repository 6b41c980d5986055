package istio

import (
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"istio.io/istio/tools/common/config"
	"istio.io/istio/tools/istio-iptables/pkg/validation"

	"github.com/sluicemesh/sluice/daemon/policy"
	"github.com/sluicemesh/sluice/daemon/redirect"
	"github.com/sluicemesh/sluice/daemon/redirect/kernel"
	"github.com/sluicemesh/sluice/test/harness/nstest"
)

// envValidatorIP makes the test binary Istio's validator: what the
// istio-validation init container runs, here as uid 1337 in a pod netns.
const envValidatorIP = "SLUICE_TEST_ISTIO_VALIDATOR_IP"

// runValidator is the child's whole job; it exits 0 when the validator's
// probe to 127.0.0.6:15002 (::6 for IPv6) was captured to 15001/15006.
func runValidator(hostIP string, timeout time.Duration) int {
	cfg := config.DefaultConfig()
	cfg.HostIP = netip.MustParseAddr(hostIP)
	cfg.ProbeTimeout = timeout
	if err := validation.NewValidator(cfg).Run(); err != nil {
		os.Stderr.WriteString("validation: " + err.Error() + "\n")
		return 1
	}
	return 0
}

func init() {
	if ip := os.Getenv(envValidatorIP); ip != "" {
		timeout, err := time.ParseDuration(os.Getenv(envValidatorIP + "_TIMEOUT"))
		if err != nil {
			timeout = 10 * time.Second
		}
		os.Exit(runValidator(ip, timeout))
	}
}

// validatorBinary is a copy of this test binary that uid 1337 can run (the
// go tool's build dir is root's alone), in a dir of our own.
func validatorBinary(t *testing.T) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "sluice-istio-validator-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	src, err := os.Open(self)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	bin := filepath.Join(dir, "validator")
	dst, err := os.OpenFile(bin, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
	return bin
}

// validate runs Istio's validator as uid/gid 1337 in ns and returns its
// error, if any, with its output.
func validate(t *testing.T, bin string, ns *nstest.NS, hostIP netip.Addr, timeout time.Duration) (string, error) {
	t.Helper()
	cmd := exec.Command("nsenter", "--net="+ns.Path, "--",
		"setpriv", "--reuid=1337", "--regid=1337", "--clear-groups", bin, "-test.run=^$")
	cmd.Env = append(os.Environ(), envValidatorIP+"="+hostIP.String(), envValidatorIP+"_TIMEOUT="+timeout.String())
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestIstioValidatorInSluicePods programs a pod netns with the ruleset
// sluice's policy gives an injected pod, and runs the istio-validation
// checker in it, as Istio's injector does before the app starts.
func TestIstioValidatorInSluicePods(t *testing.T) {
	nstest.RequireRoot(t)
	bin := validatorBinary(t)
	for _, tc := range []struct {
		name  string
		c     sidecarCase
		probe []netip.Addr // the HostIP each validator run takes its family from
	}{
		{"v4", sidecarCase{name: "v4", ips: v4}, v4},
		{"v4-tproxy", sidecarCase{name: "v4-tproxy", ips: v4, ann: a(annMode, "TPROXY")}, v4},
		{"v6-only", sidecarCase{name: "v6-only", ips: v6}, v6},
		{"dual-stack", sidecarCase{name: "dual-stack", ips: dual, env: a(envDualStack, "true")}, dual},
		{"dual-stack-dns", sidecarCase{name: "dual-stack-dns", ips: dual, env: a(envDualStack, "true", envDNS, "true")}, dual},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := policy.Rules{Sidecar: redirect.DefaultSpec()}.Decide(tc.c.pod(), nil, tc.c.ips)
			if err != nil || !d.Capture {
				t.Fatalf("policy: %+v %v", d, err)
			}
			ns := nstest.New(t, "pod")
			for _, ip := range tc.probe {
				// Without capture the validator must fail: this test can.
				if out, err := validate(t, bin, ns, ip, 2*time.Second); err == nil {
					t.Fatalf("validator (%v) passed in a pod with no capture:\n%s", ip, out)
				}
			}
			rs, err := redirect.Build(d.Spec)
			if err != nil {
				t.Fatal(err)
			}
			h := ns.Handle(t)
			if _, err := (kernel.Netlink{}).Apply(redirect.Netns(h), rs); err != nil {
				t.Fatalf("apply: %v", err)
			}
			for _, ip := range tc.probe {
				if out, err := validate(t, bin, ns, ip, 10*time.Second); err != nil {
					t.Errorf("Istio's validator (%v family) failed in the pod sluice programmed: %v\n%s\nruleset:\n%s",
						ip, err, strings.TrimSpace(out), rs.Render())
				}
			}
		})
	}
}
