package stats

import (
	"path/filepath"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

// The node's CPU time and start time come from /proc/stat: busy is every
// column but idle and iowait, in USER_HZ ticks; the start time is btime.
func TestNodeCPUAndStartTimeFromProcStat(t *testing.T) {
	proc := filepath.Join(t.TempDir(), "proc")
	// user nice system idle iowait irq softirq steal guest guest_nice
	write(t, filepath.Join(proc, "stat"), "cpu  1234 5 678 99999 4444 12 34 7 0 0\n"+
		"cpu0 1234 5 678 99999 4444 12 34 7 0 0\n"+
		"intr 100 1 2\nctxt 5000\nbtime 1700000000\nprocesses 42\nprocs_running 2\nprocs_blocked 0\n"+
		"softirq 10 1 2 3 4 0 0 0 0 0 0\n")
	now := time.Unix(1700001000, 0)
	p := New(Config{ProcRoot: proc}, nil, nil, clocktesting.NewFakeClock(now))
	st, ok := p.procStat()
	if !ok {
		t.Fatal("/proc/stat not read")
	}
	if got := p.bootTime(st, ok, now); !got.Equal(time.Unix(1700000000, 0)) {
		t.Errorf("boot time %v, want btime", got)
	}
	cpu := p.nodeCPU(st, ok, now)
	const wantNs = (1234 + 5 + 678 + 12 + 34 + 7) * 10 * uint64(time.Millisecond)
	if cpu == nil || *cpu.UsageCoreNanoSeconds != wantNs {
		t.Fatalf("node CPU %+v, want %d ns", cpu, wantNs)
	}

	// Unreadable: no CPU figures, and the start time falls back to now.
	missing := New(Config{ProcRoot: filepath.Join(t.TempDir(), "none")}, nil, nil, clocktesting.NewFakeClock(now))
	st, ok = missing.procStat()
	if ok || missing.nodeCPU(st, ok, now) != nil || !missing.bootTime(st, ok, now).Equal(now) {
		t.Errorf("missing /proc/stat: ok %v, cpu %v, boot %v", ok, missing.nodeCPU(st, ok, now), missing.bootTime(st, ok, now))
	}
}
