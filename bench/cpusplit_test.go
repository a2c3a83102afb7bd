//go:build bench

package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// cpuSplitComponents are the long-lived processes whose CPU time a burst's split names; the
// rest of the machine's CPU (runc, the CNI plugins, pause, exited shims, the kernel's own
// work) is "other". Names are comms, cut by the kernel to 15 bytes (containerd-shim
// is every runc shim, summed over the shims alive at both ends).
var cpuSplitComponents = []string{"containerd", "containerd-shim", "kube-apiserver", "etcd", "kube-scheduler", "kube-controller"}

// cpuSample is the CPU time used so far by each component (by comm; "agent" for the node
// agent's pid, "test" for this process) and the machine's busy time, not counting the user
// time of niced processes (builds running beside a benchmark are expected to be niced).
type cpuSample struct {
	byName  map[string]time.Duration
	machine time.Duration
	niced   time.Duration
}

// sampleCPU reads /proc for a cpuSample; agentPid 0 means no agent (the floor).
func sampleCPU(agentPid int) (cpuSample, error) {
	s := cpuSample{byName: map[string]time.Duration{}}
	want := map[string]bool{}
	for _, c := range cpuSplitComponents {
		want[c] = true
	}
	self := os.Getpid()
	dirs, err := filepath.Glob("/proc/[0-9]*")
	if err != nil {
		return s, fmt.Errorf("listing /proc: %w", err)
	}
	for _, d := range dirs {
		pid, err := strconv.Atoi(filepath.Base(d))
		if err != nil {
			continue
		}
		comm, cpu, err := procCPU(pid)
		if err != nil {
			continue // exited since the listing
		}
		switch {
		case pid == agentPid:
			s.byName["agent"] += cpu
		case pid == self:
			s.byName["test"] += cpu
		case want[comm]:
			s.byName[comm] += cpu
		}
	}
	stat, err := os.ReadFile("/proc/stat")
	if err != nil {
		return s, fmt.Errorf("reading /proc/stat: %w", err)
	}
	line, _, _ := strings.Cut(string(stat), "\n")
	f := strings.Fields(line) // cpu user nice system idle iowait irq softirq steal ...
	if len(f) < 8 || f[0] != "cpu" {
		return s, fmt.Errorf("unexpected first line of /proc/stat: %q", line)
	}
	jiffies := func(i int) time.Duration {
		v, _ := strconv.ParseInt(f[i], 10, 64)
		return time.Duration(v) * time.Second / clkTck
	}
	s.machine = jiffies(1) + jiffies(3) + jiffies(6) + jiffies(7)
	s.niced = jiffies(2)
	return s, nil
}

// clkTck is USER_HZ, the unit of /proc's CPU times on Linux.
const clkTck = 100

// procCPU is a process's comm and user+system CPU time.
func procCPU(pid int) (string, time.Duration, error) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", 0, err
	}
	s := string(stat)
	open, end := strings.IndexByte(s, '('), strings.LastIndex(s, ")")
	if open < 0 || end < open || end+2 > len(s) {
		return "", 0, fmt.Errorf("unexpected /proc/%d/stat", pid)
	}
	fields := strings.Fields(s[end+2:])
	if len(fields) < 13 {
		return "", 0, fmt.Errorf("short /proc/%d/stat", pid)
	}
	ut, _ := strconv.ParseInt(fields[11], 10, 64)
	st, _ := strconv.ParseInt(fields[12], 10, 64)
	return s[open+1 : end], time.Duration(ut+st) * time.Second / clkTck, nil
}

// printCPUSplit prints where the machine's CPU went between a and b: each component's
// seconds, the rest as "other", and the wall time's worth of both cores for scale.
func printCPUSplit(prefix string, a, b cpuSample, wall time.Duration) {
	var parts []string
	var named time.Duration
	names := make([]string, 0, len(b.byName))
	for n := range b.byName {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		d := b.byName[n] - a.byName[n]
		if d <= 0 {
			continue
		}
		named += d
		parts = append(parts, fmt.Sprintf("%s %.2fs", n, d.Seconds()))
	}
	total := b.machine - a.machine
	parts = append(parts, fmt.Sprintf("other (runc, CNI, shims that exited, kernel) %.2fs", (total-named).Seconds()))
	fmt.Printf("BENCH %s CPU split over %v: machine %.2fs of %.2fs (2 cores; niced %.2fs not counted): %s\n",
		prefix, wall.Round(time.Millisecond), total.Seconds(), 2*wall.Seconds(), (b.niced - a.niced).Seconds(), strings.Join(parts, ", "))
}

// mustSampleCPU is sampleCPU for a test.
func mustSampleCPU(t *testing.T, agentPid int) cpuSample {
	t.Helper()
	s, err := sampleCPU(agentPid)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
