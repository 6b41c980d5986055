package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// clockTick is USER_HZ, which /proc reports CPU time in; 100 on Linux.
const clockTick = 100

// cpuTimes is CPU time spent so far by the machine (busy, all cores), by
// one process (the agent), by this process's waited-for children (the
// plugin execs libcni runs), by this process (libcni) and in interrupts
// (irq + softirq: the kernel's deferred work, RCU callbacks among it), to
// split a storm's cost.
type cpuTimes struct{ machine, process, children, self, irq time.Duration }

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
		if i == 5 || i == 6 {
			t.irq += ticks(n)
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
	t.children, t.self = rusage(syscall.RUSAGE_CHILDREN), rusage(syscall.RUSAGE_SELF)
	return t, nil
}

func rusage(who int) time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(who, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func ticks(n int64) time.Duration { return time.Duration(n) * time.Second / clockTick }

func (t cpuTimes) sub(o cpuTimes) cpuTimes {
	return cpuTimes{machine: t.machine - o.machine, process: t.process - o.process,
		children: t.children - o.children, self: t.self - o.self, irq: t.irq - o.irq}
}

func (t cpuTimes) plus(o cpuTimes) cpuTimes {
	return cpuTimes{machine: t.machine + o.machine, process: t.process + o.process,
		children: t.children + o.children, self: t.self + o.self, irq: t.irq + o.irq}
}
