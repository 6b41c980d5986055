package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// clockTick is USER_HZ, which /proc reports CPU time in; 100 on Linux.
const clockTick = 100

// cpuTimes is CPU time spent so far by the machine (busy, all cores) and by
// one process, to split a storm's cost between the agent and the rest
// (plugin execs, libcni, the kernel).
type cpuTimes struct{ machine, process time.Duration }

func readCPU(pid int) (cpuTimes, error) {
	var t cpuTimes
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return t, err
	}
	// cpu user nice system idle iowait irq softirq steal ...
	f := strings.Fields(strings.SplitN(string(b), "\n", 2)[0])
	for i, v := range f[1:] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return t, fmt.Errorf("/proc/stat: %w", err)
		}
		if i != 3 && i != 4 { // not idle, not iowait
			t.machine += ticks(n)
		}
	}
	b, err = os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return t, err
	}
	// Fields after the ")" that ends comm: utime and stime are 12th and 13th.
	rest := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	for _, i := range []int{11, 12} {
		n, err := strconv.ParseInt(rest[i], 10, 64)
		if err != nil {
			return t, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		t.process += ticks(n)
	}
	return t, nil
}

func ticks(n int64) time.Duration { return time.Duration(n) * time.Second / clockTick }

func (t cpuTimes) sub(o cpuTimes) cpuTimes {
	return cpuTimes{machine: t.machine - o.machine, process: t.process - o.process}
}
