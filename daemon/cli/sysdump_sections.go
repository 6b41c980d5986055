package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"

	sluicev1 "github.com/sluicemesh/sluice/api/sluice/v1"
	"github.com/sluicemesh/sluice/daemon/sysdump"
)

const sysdumpReadme = `sluice-agent sysdump: a support bundle of one node's sluice agent.

  versions.json          this binary, the running agent, the installed plugin, the kernel, Go
  agent/status.*         readiness, the ztunnel link, workload counts (sluice-agent status)
  agent/workloads.*      the enrolled attachments (sluice-agent workloads)
  agent/rulesets/*.nft   each attachment's ruleset as nft text, with the kernel's drift
  agent/flags.txt        the running agent's effective flags and where each came from
  agent/env.txt          the agent's environment
  health/                /healthz, /readyz and /metrics from the health port
  cni/conf/              the files of the CNI config dir (the conflists)
  installer.txt          where the sluice entry and the plugin binaries are
  journal/               the state dir's records
  logs/                  the agent's container logs, when the node's pod log dir is readable here

Redacted throughout, by the name of the key, variable or flag (token, secret,
password, key, credential, authorization, cookie, session) and by the shape
of the value (HTTP authorization headers, JWTs, private keys, passwords
in URLs). Kubeconfigs, service-account tokens and key files are never read
into the bundle. Files in the dirs read are taken only when regular: no
symlink is followed and no FIFO, socket or device is opened.
`

// collect writes every section. Each one that fails says so in a note and
// the dump goes on: a half-broken node is when a bundle is wanted.
func collect(ctx context.Context, a *sysdump.Archive, ag *agentView, opts sysdumpFlags) {
	for _, n := range ag.notes {
		a.Note("%s", n)
	}
	if ag.conn != nil {
		defer ag.conn.Close()
	}
	dumpVersions(ctx, a, ag)
	dumpAgent(ctx, a, ag)
	dumpFlags(a, ag)
	dumpHealth(ctx, a, ag, opts.lim.File)
	dumpDir(a, ag.root, ag.cfg.CNIConfDir, "cni/conf", opts.lim.File, true)
	dumpInstaller(a, ag)
	dumpDir(a, ag.root, ag.cfg.StateDir, "journal", opts.lim.File, true)
	dumpLogs(a, ag, opts.podLogDir, opts.lim.File)
}

// maxEntries bounds a listing of a dir someone filled with files.
const maxEntries = 10000

// dumpDir copies a dir's regular files under prefix/ and lists every entry
// in prefix.txt. Secret files are listed, never read into the archive.
func dumpDir(a *sysdump.Archive, root, dir, prefix string, max int64, withFiles bool) {
	d, err := sysdump.OpenDir(root, dir)
	if err != nil {
		a.Add(prefix+".txt", []byte(fmt.Sprintf("# %s\n%v\n", dir, err)))
		a.Note("%s: %v", prefix, err)
		return
	}
	defer d.Close()
	names, more, err := d.Names(maxEntries)
	var list bytes.Buffer
	tw := tabwriter.NewWriter(&list, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "# %s\n", dir)
	if err != nil {
		fmt.Fprintf(tw, "# listing: %v\n", err)
	}
	for _, name := range names {
		in, err := d.Lstat(name)
		if err != nil {
			fmt.Fprintf(tw, "%s\t%v\n", name, err)
			continue
		}
		target := ""
		if in.Target != "" {
			target = " -> " + in.Target
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s%s\n", in.Mode, in.Kind, in.ModTime.UTC().Format("2006-01-02T15:04:05Z"), in.Size, name, target)
		if !withFiles || in.Kind != "file" {
			if in.Kind != "dir" {
				a.Omit(prefix+"/"+name, fmt.Sprintf("a %s%s, not read", in.Kind, target))
			}
			continue
		}
		dumpFile(a, d, name, prefix+"/"+name, max)
	}
	if more {
		fmt.Fprintf(tw, "# more than %d entries; the rest not listed\n", maxEntries)
	}
	_ = tw.Flush()
	a.Add(prefix+".txt", list.Bytes())
}

func dumpFile(a *sysdump.Archive, d *sysdump.Dir, name, as string, max int64) {
	f, err := d.Read(name, max, false)
	var nr *sysdump.NotRegularError
	switch {
	case errors.As(err, &nr):
		a.Omit(as, nr.Error())
		return
	case err != nil:
		a.Omit(as, err.Error())
		return
	}
	if why := sysdump.SecretFile(name, f.Data); why != "" {
		a.Omit(as, why+": never included")
		return
	}
	a.AddCut(as, f.Data, f.Truncated)
}

type versionsView struct {
	Sysdump struct {
		Version string `json:"version"`
		Go      string `json:"go"`
	} `json:"sysdump"`
	Agent   map[string]any `json:"agent"`
	Plugins []binaryInfo   `json:"plugins"`
	Kernel  map[string]any `json:"kernel"`
}

// dumpAgent asks the agent what the status, workloads and get commands
// print, in both their forms.
func dumpAgent(ctx context.Context, a *sysdump.Archive, ag *agentView) {
	if ag.conn == nil {
		a.Note("agent: no connection to %s", ag.socket)
		return
	}
	for _, s := range []struct {
		name string
		run  func(clients, []string) (view, error)
	}{{"agent/status", getStatus}, {"agent/workloads", getWorkloads}} {
		v, err := s.run(ag.c, nil)
		if err != nil {
			a.Add(s.name+".txt", []byte(ag.c.why(err)+"\n"))
			a.Note("%s: %s", s.name, ag.c.why(err))
			continue
		}
		addView(a, s.name, v)
	}
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	ws, err := ag.c.debug.ListWorkloads(cctx, &sluicev1.ListWorkloadsRequest{})
	cancel()
	if err != nil {
		a.Note("agent/rulesets: %s", ag.c.why(err))
		return
	}
	for i, w := range ws.Workloads {
		if ctx.Err() != nil {
			a.Note("agent/rulesets: --timeout reached after %d of %d", i, len(ws.Workloads))
			return
		}
		name := fmt.Sprintf("agent/rulesets/%s_%s_%s_%s.nft", w.GetPod().GetNamespace(), w.GetPod().GetName(), short(w.ContainerId), w.IfName)
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		resp, err := ag.c.debug.GetWorkload(cctx, &sluicev1.GetWorkloadRequest{ContainerId: w.ContainerId, IfName: w.IfName})
		cancel()
		if err != nil {
			a.Add(name, []byte("# "+ag.c.why(err)+"\n"))
			continue
		}
		var b strings.Builder
		fmt.Fprintf(&b, "# pod %s/%s container %s interface %s netns %s\n", w.GetPod().GetNamespace(), w.GetPod().GetName(), w.ContainerId, w.IfName, w.Netns)
		if len(resp.Drift) == 0 {
			b.WriteString("# kernel: in sync\n")
		}
		for _, d := range resp.Drift {
			fmt.Fprintf(&b, "# kernel drift: %s\n", d)
		}
		b.WriteString(resp.Ruleset)
		a.Add(name, []byte(b.String()))
	}
}

func addView(a *sysdump.Archive, name string, v view) {
	for _, f := range []string{"json", "table"} {
		var b bytes.Buffer
		if err := render(&b, f, v); err != nil {
			a.Note("%s: %v", name, err)
		}
		ext := map[string]string{"json": ".json", "table": ".txt"}[f]
		a.Add(name+ext, b.Bytes())
	}
}

func addJSON(a *sysdump.Archive, name string, v any) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		a.Note("%s: %v", name, err)
		return
	}
	a.Add(name, append(b, '\n'))
}

// dumpFlags writes the effective flags and the environment, each value of
// a secret-named variable replaced before it is written.
func dumpFlags(a *sysdump.Archive, ag *agentView) {
	var b bytes.Buffer
	if ag.pid != 0 {
		fmt.Fprintf(&b, "# the running agent's flags (pid %d: its command line and environment, as it parses them)\n", ag.pid)
	} else {
		b.WriteString("# not the running agent's: it could not be read; the flags after -- and this process's environment\n")
	}
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	for _, r := range ag.rows {
		fmt.Fprintf(tw, "--%s=%s\t(%s)\n", r.Name, r.Value, r.Source)
	}
	_ = tw.Flush()
	a.Add("agent/flags.txt", b.Bytes())
	var e bytes.Buffer
	for _, kv := range ag.env {
		k, _, _ := strings.Cut(kv, "=")
		if sysdump.SecretName(k) {
			kv = k + "=" + sysdump.Redacted
		}
		fmt.Fprintln(&e, kv)
	}
	a.Add("agent/env.txt", e.Bytes())
}

func dumpHealth(ctx context.Context, a *sysdump.Archive, ag *agentView, max int64) {
	for _, p := range []struct{ path, name string }{{"/healthz", "health/healthz.txt"}, {"/readyz", "health/readyz.txt"}, {"/metrics", "health/metrics.txt"}} {
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		code, body, err := sysdump.Get(cctx, ag.cfg.HealthAddr, p.path, max+1)
		cancel()
		if err != nil {
			a.Add(p.name, []byte(fmt.Sprintf("# %v\n", err)))
			a.Note("%s: %v", p.path, err)
			continue
		}
		a.Add(p.name, append([]byte(fmt.Sprintf("# HTTP %d\n", code)), body...))
	}
}

// dumpInstaller says where the sluice entry is and what the bin dirs hold.
func dumpInstaller(a *sysdump.Archive, ag *agentView) {
	var b bytes.Buffer
	c := ag.cfg
	fmt.Fprintf(&b, "install %v, chained %v, trigger %s, cni-conf-name %q, conf dir %s, bin dirs %s\n",
		c.Install, c.Chained, c.Trigger, c.CNIConfName, c.CNIConfDir, strings.Join(c.CNIBinDirs, ","))
	d, err := sysdump.OpenDir(ag.root, c.CNIConfDir)
	if err != nil {
		fmt.Fprintf(&b, "conf dir: %v\n", err)
	} else {
		names, _, _ := d.Names(maxEntries)
		found := 0
		for _, name := range names {
			if !strings.HasSuffix(name, ".conflist") && !strings.HasSuffix(name, ".conf") {
				continue
			}
			f, err := d.Read(name, 1<<20, false)
			if err != nil {
				continue
			}
			var list struct {
				Name    string `json:"name"`
				Plugins []struct {
					Type string `json:"type"`
				} `json:"plugins"`
			}
			if json.Unmarshal(f.Data, &list) != nil {
				fmt.Fprintf(&b, "%s: does not parse as JSON\n", name)
				continue
			}
			for i, p := range list.Plugins {
				if p.Type == "sluice" {
					fmt.Fprintf(&b, "%s: the sluice entry, plugin %d of %d in network %q\n", name, i+1, len(list.Plugins), list.Name)
					found++
				}
			}
		}
		if found == 0 {
			b.WriteString("no conflist in the conf dir holds a sluice entry\n")
		}
		d.Close()
	}
	for _, dir := range c.CNIBinDirs {
		p := pluginIn(ag.root, dir, "")
		if p.Error != "" {
			fmt.Fprintf(&b, "%s: %s\n", p.Path, p.Error)
		} else {
			fmt.Fprintf(&b, "%s: sha256 %s, %s (versions.json compares it with the agent's)\n", p.Path, p.SHA256, p.Go)
		}
	}
	a.Add("installer.txt", b.Bytes())
}

// dumpLogs copies the end of the agent's container logs from the
// kubelet's pod log dir, <ns>_<pod>_<uid>/<container>/*.log. The agent
// keeps no log of its own: it writes to stderr and the runtime keeps that.
func dumpLogs(a *sysdump.Archive, ag *agentView, dir string, max int64) {
	howto := "Get the agent's logs with kubectl -n <namespace> logs <agent pod> (--previous for the last restart),\nor run sysdump on the node as root, where the kubelet's pod log dir (--pod-log-dir) is readable.\n"
	ns, pod := ag.cfg.PodNamespace, ag.cfg.PodName
	if ns == "" || pod == "" {
		a.Add("logs/README.txt", []byte("The agent's pod is not known (--pod-name, --pod-namespace are empty): no logs collected.\n"+howto))
		return
	}
	root, err := sysdump.OpenDir("", dir)
	if err != nil {
		a.Add("logs/README.txt", []byte(fmt.Sprintf("%v\n%s", err, howto)))
		return
	}
	defer root.Close()
	names, _, _ := root.Names(maxEntries)
	found := 0
	for _, pd := range names {
		if !strings.HasPrefix(pd, ns+"_"+pod+"_") {
			continue
		}
		pdir, err := root.Sub(pd)
		if err != nil {
			a.Omit("logs/"+pd, err.Error())
			continue
		}
		containers, _, _ := pdir.Names(64)
		for _, cn := range containers {
			cdir, err := pdir.Sub(cn)
			if err != nil {
				a.Omit("logs/"+cn, err.Error())
				continue
			}
			files, _, _ := cdir.Names(64)
			for _, fn := range files {
				if !strings.HasSuffix(fn, ".log") && !strings.Contains(fn, ".log.") || strings.HasSuffix(fn, ".gz") {
					continue
				}
				f, err := cdir.Read(fn, max, true)
				if err != nil {
					a.Omit("logs/"+cn+"/"+fn, err.Error())
					continue
				}
				a.AddCut("logs/"+cn+"/"+fn, f.Data, f.Truncated)
				found++
			}
			cdir.Close()
		}
		pdir.Close()
	}
	if found == 0 {
		a.Add("logs/README.txt", []byte(fmt.Sprintf("No log of pod %s/%s under %s.\n%s", ns, pod, dir, howto)))
	}
}
