package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/containernetworking/cni/libcni"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	sluicev1 "github.com/sluicemesh/sluice/api/sluice/v1"
)

// stormResult is one storm: count simultaneous ADDs, then count
// simultaneous DELs of the same pods. Every call's latency, the wall time
// from the first start to the last finish, the failures, and the CPU the
// ADD and the DEL storms cost (the machine's, and the agent's when there is one).
type stormResult struct {
	add, del         series
	addWall, delWall time.Duration
	errors           int
	firstErr         error
	addCPU, delCPU   cpuTimes
	// leftover is attachments the agent still holds after the DEL storm:
	// DELs the plugin reported done (a DEL never fails a pod's teardown)
	// whose agent call ran past the plugin's deadline.
	leftover int
}

func (r *stormResult) addRate() float64 { return rate(len(r.add.d), r.addWall) }
func (r *stormResult) delRate() float64 { return rate(len(r.del.d), r.delWall) }

func rate(n int, wall time.Duration) float64 {
	if wall <= 0 {
		return 0
	}
	return float64(n) / wall.Seconds()
}

// storm runs conf's ADD on count fresh netns at once, then its DEL at once.
// agentPID, when non-zero, is the process whose CPU the ADD storm charges.
func (n *node) storm(name string, conf *libcni.NetworkConfig, count, agentPID int) (*stormResult, error) {
	paths, err := n.pods(name, count)
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, p := range paths {
			n.nd.remove(p)
		}
	}()
	res := &stormResult{add: series{name: name + " ADD"}, del: series{name: name + " DEL"}}
	var mu sync.Mutex
	one := func(s *series, op func(ctx context.Context, conf *libcni.NetworkConfig, rt *libcni.RuntimeConf) error) time.Duration {
		var wg sync.WaitGroup
		gate := make(chan struct{})
		for i, p := range paths {
			wg.Go(func() {
				<-gate
				start := time.Now()
				err := op(context.Background(), conf, rc(fmt.Sprintf("%s-%d", name, i), p))
				d := time.Since(start)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					res.errors++
					if res.firstErr == nil {
						res.firstErr = err
					}
					return
				}
				s.add(d)
			})
		}
		start := time.Now()
		close(gate)
		wg.Wait()
		return time.Since(start)
	}
	before, err := readCPU(agentPID)
	if err != nil {
		return nil, err
	}
	res.addWall = one(&res.add, func(ctx context.Context, c *libcni.NetworkConfig, rt *libcni.RuntimeConf) error {
		_, err := n.lib.AddNetwork(ctx, c, rt)
		return err
	})
	after, err := readCPU(agentPID)
	if err != nil {
		return nil, err
	}
	res.addCPU = after.sub(before)
	res.delWall = one(&res.del, n.lib.DelNetwork)
	end, err := readCPU(agentPID)
	if err != nil {
		return nil, err
	}
	res.delCPU = end.sub(after)
	if conf == n.sluice {
		if res.leftover, err = n.enrolled(); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// enrolled is how many attachments the agent holds (Debug.ListWorkloads).
func (n *node) enrolled() (int, error) {
	conn, err := grpc.NewClient("unix://"+n.socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := sluicev1.NewDebugClient(conn).ListWorkloads(ctx, &sluicev1.ListWorkloadsRequest{})
	if err != nil {
		return 0, fmt.Errorf("list workloads: %w", err)
	}
	return len(resp.Workloads), nil
}

// hog keeps one core busy (a shell loop pinned to CPU 0) until stopped: the
// "other work on the machine" the storm is run against a second time.
type hog struct{ cmd *exec.Cmd }

func startHog() (*hog, error) {
	cmd := exec.Command("taskset", "-c", "0", "sh", "-c", "while :; do :; done")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start CPU hog: %w", err)
	}
	return &hog{cmd: cmd}, nil
}

func (h *hog) stop() {
	if h == nil || h.cmd.Process == nil {
		return
	}
	_ = h.cmd.Process.Kill()
	_ = h.cmd.Wait()
	h.cmd.Process = nil
}

// storms is the loopback and sluice storms, on a quiet machine and with
// the hog: rounds of each, the two plugins in turn, the one that goes first
// swapped every round, each storm started on a settled machine. One storm
// of 200 lasts half a second and sluice's throughput over loopback's moved
// from 0.57× to 1.20× between the storms of one run; the rounds are pooled (every call's latency; throughput as all
// calls over all their walls) and each round's ratio is kept for the spread.
type storms struct {
	rounds        int
	quiet, hogged stormPair
}

type stormPair struct {
	loopback, sluice *stormResult
	// addRatios and delRatios are sluice's throughput over loopback's,
	// round by round.
	addRatios, delRatios []float64
}

// settled says each storm waits for a settled machine (not -smoke, which
// times nothing and runs containerd beside the storms).
func (n *node) storms(count, rounds int, settled bool) (*storms, error) {
	out := &storms{rounds: rounds}
	for _, load := range []bool{false, true} {
		var h *hog
		busy := 0.0
		if load {
			var err error
			if h, err = startHog(); err != nil {
				return nil, err
			}
			busy = 1
		}
		pair, err := n.stormRounds(count, rounds, busy, settled)
		h.stop()
		if err != nil {
			return nil, err
		}
		if load {
			out.hogged = *pair
		} else {
			out.quiet = *pair
		}
	}
	return out, nil
}

// stormRounds runs rounds of loopback and sluice storms; busy is the cores
// other work keeps busy (the hog's).
func (n *node) stormRounds(count, rounds int, busy float64, settled bool) (*stormPair, error) {
	p := &stormPair{loopback: &stormResult{}, sluice: &stormResult{}}
	for r := range rounds {
		confs := []*libcni.NetworkConfig{n.loopback, n.sluice}
		if r%2 == 1 {
			confs[0], confs[1] = confs[1], confs[0]
		}
		got := map[*libcni.NetworkConfig]*stormResult{}
		for _, conf := range confs {
			if settled {
				settle(busy)
			}
			name := "loopback"
			if conf == n.sluice {
				name = "sluice"
			}
			res, err := n.storm(name, conf, count, n.agent.Process.Pid)
			if err != nil {
				return nil, err
			}
			got[conf] = res
		}
		lo, sl := got[n.loopback], got[n.sluice]
		p.addRatios = append(p.addRatios, sl.addRate()/lo.addRate())
		p.delRatios = append(p.delRatios, sl.delRate()/lo.delRate())
		p.loopback.merge(lo)
		p.sluice.merge(sl)
	}
	return p, nil
}

// merge adds one storm's calls, walls, errors and CPU to r.
func (r *stormResult) merge(o *stormResult) {
	r.add.name, r.del.name = o.add.name, o.del.name
	r.add.d = append(r.add.d, o.add.d...)
	r.del.d = append(r.del.d, o.del.d...)
	r.addWall += o.addWall
	r.delWall += o.delWall
	r.errors += o.errors
	if r.firstErr == nil {
		r.firstErr = o.firstErr
	}
	r.addCPU = r.addCPU.plus(o.addCPU)
	r.delCPU = r.delCPU.plus(o.delCPU)
	r.leftover += o.leftover
}

// settle waits, at most two seconds, until the machine is no busier than
// busy cores (and a sixth of one) over a fifth of a second: the kernel
// frees the last storm's network namespaces in the background, and the
// storm that starts while it does pays for them.
func settle(busy float64) {
	const window = 200 * time.Millisecond
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); {
		a, err := readCPU(os.Getpid())
		time.Sleep(window)
		b, err2 := readCPU(os.Getpid())
		if err != nil || err2 != nil || (b.machine-a.machine).Seconds()/window.Seconds() <= busy+1.0/6 {
			return
		}
	}
}
