package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/vishvananda/netns"

	"github.com/sluicemesh/sluice/daemon/redirect"
	"github.com/sluicemesh/sluice/daemon/redirect/kernel"
)

// istioRules is what istio-iptables programs for the default sidecar
// (REDIRECT to 15001/15006, proxy uid and gid 1337, inbound ports 15008,
// 15090, 15021, 15020 passed, all outbound and inbound captured) as
// iptables-restore input: the peer of redirect.DefaultSpec().
func istioRules(v6 bool) string {
	passthrough, localhost := "127.0.0.6/32", "127.0.0.1/32"
	if v6 {
		passthrough, localhost = "::6/128", "::1/128"
	}
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	w("* nat")
	for _, c := range []string{"ISTIO_INBOUND", "ISTIO_REDIRECT", "ISTIO_IN_REDIRECT", "ISTIO_OUTPUT"} {
		w("-N %s", c)
	}
	w("-A ISTIO_INBOUND -p tcp --dport 15008 -j RETURN")
	w("-A ISTIO_REDIRECT -p tcp -j REDIRECT --to-ports 15001")
	w("-A ISTIO_IN_REDIRECT -p tcp -j REDIRECT --to-ports 15006")
	w("-A PREROUTING -p tcp -j ISTIO_INBOUND")
	for _, p := range []int{15090, 15021, 15020} {
		w("-A ISTIO_INBOUND -p tcp --dport %d -j RETURN", p)
	}
	w("-A ISTIO_INBOUND -p tcp -j ISTIO_IN_REDIRECT")
	w("-A OUTPUT -p tcp -j ISTIO_OUTPUT")
	w("-A ISTIO_OUTPUT -o lo -s %s -j RETURN", passthrough)
	for _, owner := range []string{"--uid-owner", "--gid-owner"} {
		w("-A ISTIO_OUTPUT ! -d %s -o lo -p tcp ! --dport 15008 -m owner %s 1337 -j ISTIO_IN_REDIRECT", localhost, owner)
		w("-A ISTIO_OUTPUT -o lo -m owner ! %s 1337 -j RETURN", owner)
		w("-A ISTIO_OUTPUT -m owner %s 1337 -j RETURN", owner)
	}
	w("-A ISTIO_OUTPUT -d %s -j RETURN", localhost)
	w("-A ISTIO_OUTPUT -j ISTIO_REDIRECT")
	w("COMMIT")
	return b.String()
}

// ruleTool programs the default sidecar ruleset into a netns, end to end
// as its users run it.
type ruleTool struct {
	name string
	run  func(nsPath string) error
}

func ruleTools(tmp string) ([]ruleTool, error) {
	r, err := redirect.Build(redirect.DefaultSpec())
	if err != nil {
		return nil, err
	}
	files := map[string]string{"sluice.nft": r.Render(), "istio.v4": istioRules(false), "istio.v6": istioRules(true)}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(tmp, name), []byte(text), 0o644); err != nil {
			return nil, err
		}
	}
	execIn := func(nsPath string, argv ...string) error {
		out, err := exec.Command("nsenter", append([]string{"--net=" + nsPath, "--"}, argv...)...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%s: %v: %s", strings.Join(argv, " "), err, out)
		}
		return nil
	}
	apply := func(nsPath string) error {
		// Build is part of the cost: the agent builds per pod.
		r, err := redirect.Build(redirect.DefaultSpec())
		if err != nil {
			return err
		}
		h, err := netns.GetFromPath(nsPath)
		if err != nil {
			return err
		}
		defer h.Close()
		_, err = kernel.Netlink{}.Apply(redirect.Netns(h), r)
		return err
	}
	tools := []ruleTool{
		{"sluice (netlink, kernel.Netlink.Apply)", apply},
		{"nft -f", func(ns string) error { return execIn(ns, "nft", "-f", filepath.Join(tmp, "sluice.nft")) }},
		{"iptables-restore + ip6tables-restore", func(ns string) error {
			if err := execIn(ns, "iptables-restore", filepath.Join(tmp, "istio.v4")); err != nil {
				return err
			}
			return execIn(ns, "ip6tables-restore", filepath.Join(tmp, "istio.v6"))
		}},
	}
	if _, err := exec.LookPath("iptables-legacy-restore"); err == nil {
		tools = append(tools, ruleTool{"iptables-legacy-restore + ip6tables-legacy-restore", func(ns string) error {
			if err := execIn(ns, "iptables-legacy-restore", filepath.Join(tmp, "istio.v4")); err != nil {
				return err
			}
			return execIn(ns, "ip6tables-legacy-restore", filepath.Join(tmp, "istio.v6"))
		}})
	}
	return tools, nil
}

// benchRules times each tool in n fresh namespaces, interleaved so that
// noise from the machine falls on all of them alike; then sluice's replace
// (Apply over its own table, a retried ADD or a repair).
func benchRules(nd *nsDir, tmp string, n int) ([]series, error) {
	tools, err := ruleTools(tmp)
	if err != nil {
		return nil, err
	}
	out := make([]series, len(tools)+1)
	for i, t := range tools {
		out[i].name = t.name
	}
	out[len(tools)].name = "sluice replace (table already there)"
	for i := range n {
		for j, t := range tools {
			path, err := nd.create(fmt.Sprintf("rules-%d-%d", i, j))
			if err != nil {
				return nil, err
			}
			start := time.Now()
			err = t.run(path)
			d := time.Since(start)
			if err == nil && j == 0 {
				start := time.Now()
				err = t.run(path)
				out[len(tools)].add(time.Since(start))
			}
			nd.remove(path)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", t.name, err)
			}
			out[j].add(d)
		}
	}
	return out, nil
}
