package stats

import (
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	promprocfs "github.com/prometheus/procfs"

	"github.com/nodelet/nodelet/procfs"
)

// nodeMemory is the node's memory as upstream reports it: the working set is usage
// minus inactive file pages (cache the kernel can drop), and available is capacity
// minus the working set, so memory.available ignores reclaimable cache.
func (p *Provider) nodeMemory(mt metav1.Time) *statsapi.MemoryStats {
	mi := p.meminfo()
	total, ok := mi["MemTotal"]
	if !ok {
		return nil
	}
	var usage, inactive uint64
	var rss *uint64
	if v1 := p.v1Memory("/"); !p.cfg.Unified && v1 != nil {
		usage, inactive, rss = v1.usage, v1.inactiveFile, v1.rss
	} else {
		// The v2 root cgroup has no memory.current: derive usage from meminfo.
		usage = satSub(total, mi["MemFree"])
		inactive = mi["Inactive(file)"]
	}
	ws := satSub(usage, inactive)
	avail := satSub(total, ws)
	return &statsapi.MemoryStats{Time: mt, UsageBytes: &usage, WorkingSetBytes: &ws, AvailableBytes: &avail, RSSBytes: rss}
}

type cgroupMem struct {
	usage, inactiveFile uint64
	rss                 *uint64
}

// v1Memory reads a cgroup v1 memory cgroup; nil when it is not there.
func (p *Provider) v1Memory(path string) *cgroupMem {
	dir := filepath.Join(p.cfg.CgroupRoot, "memory", path)
	usage, err := readUint(filepath.Join(dir, "memory.usage_in_bytes"))
	if err != nil {
		return nil
	}
	st := readKV(filepath.Join(dir, "memory.stat"))
	m := &cgroupMem{usage: usage, inactiveFile: st["total_inactive_file"]}
	if v, ok := st["total_rss"]; ok {
		m.rss = &v
	}
	return m
}

// cgroupMemory is the memory of the cgroup at path (cgroupfs form), nil if unreadable.
func (p *Provider) cgroupMemory(path string, mt metav1.Time) *statsapi.MemoryStats {
	var m *cgroupMem
	if p.cfg.Unified {
		dir := filepath.Join(p.cfg.CgroupRoot, path)
		usage, err := readUint(filepath.Join(dir, "memory.current"))
		if err != nil {
			return nil
		}
		st := readKV(filepath.Join(dir, "memory.stat"))
		m = &cgroupMem{usage: usage, inactiveFile: st["inactive_file"]}
		if v, ok := st["anon"]; ok {
			m.rss = &v
		}
	} else if m = p.v1Memory(path); m == nil {
		return nil
	}
	ws := satSub(m.usage, m.inactiveFile)
	usage := m.usage
	return &statsapi.MemoryStats{Time: mt, UsageBytes: &usage, WorkingSetBytes: &ws, RSSBytes: m.rss}
}

// nodeSwap is the node's swap from meminfo: used = SwapTotal - SwapFree, available =
// SwapFree. nil when meminfo has no swap lines.
func (p *Provider) nodeSwap(mt metav1.Time) *statsapi.SwapStats {
	mi := p.meminfo()
	total, ok := mi["SwapTotal"]
	if !ok {
		return nil
	}
	free := mi["SwapFree"]
	used := satSub(total, free)
	return &statsapi.SwapStats{Time: mt, SwapUsageBytes: &used, SwapAvailableBytes: &free}
}

// cgroupSwap is the swap use of the cgroup at path on cgroup v2 (memory.swap.current),
// with what is left under memory.swap.max when that is a number. nil on v1 (swap is
// never limited per pod there) and when the files are missing.
func (p *Provider) cgroupSwap(path string, mt metav1.Time) *statsapi.SwapStats {
	if !p.cfg.Unified {
		return nil
	}
	dir := filepath.Join(p.cfg.CgroupRoot, path)
	used, err := readUint(filepath.Join(dir, "memory.swap.current"))
	if err != nil {
		return nil
	}
	out := &statsapi.SwapStats{Time: mt, SwapUsageBytes: &used}
	if limit, err := readUint(filepath.Join(dir, "memory.swap.max")); err == nil {
		avail := satSub(limit, used)
		out.SwapAvailableBytes = &avail
	}
	return out
}

// cgroupPIDs is pids.current of the cgroup at path.
func (p *Provider) cgroupPIDs(path string) (uint64, bool) {
	dir := filepath.Join(p.cfg.CgroupRoot, path)
	if !p.cfg.Unified {
		dir = filepath.Join(p.cfg.CgroupRoot, "pids", path)
	}
	n, err := readUint(filepath.Join(dir, "pids.current"))
	return n, err == nil
}

// procStat reads /proc/stat with github.com/prometheus/procfs; false when it
// cannot be read.
func (p *Provider) procStat() (promprocfs.Stat, bool) {
	fs, err := promprocfs.NewFS(p.cfg.ProcRoot)
	if err != nil {
		return promprocfs.Stat{}, false
	}
	st, err := fs.Stat()
	return st, err == nil
}

// nodeCPU is the node's busy CPU time from /proc/stat and its rate since the last call.
func (p *Provider) nodeCPU(st promprocfs.Stat, ok bool, now time.Time) *statsapi.CPUStats {
	if !ok {
		return nil
	}
	// All but idle and iowait are busy. procfs gives seconds (ticks / USER_HZ).
	c := st.CPUTotal
	busy := c.User + c.Nice + c.System + c.IRQ + c.SoftIRQ + c.Steal
	total := uint64(math.Round(busy * float64(time.Second)))
	return &statsapi.CPUStats{Time: metav1.NewTime(now), UsageCoreNanoSeconds: &total, UsageNanoCores: p.rate("", total, now)}
}

// rlimit is the node's process table: the smaller of pid_max and threads-max, and the
// number of tasks (what pid.available is computed from).
func (p *Provider) rlimit(mt metav1.Time) *statsapi.RlimitStats {
	pidMax, err1 := readUint(filepath.Join(p.cfg.ProcRoot, "sys/kernel/pid_max"))
	threadsMax, err2 := readUint(filepath.Join(p.cfg.ProcRoot, "sys/kernel/threads-max"))
	if err1 != nil && err2 != nil {
		return nil
	}
	maxPID := pidMax
	if err1 != nil || (err2 == nil && threadsMax < pidMax) {
		maxPID = threadsMax
	}
	out := &statsapi.RlimitStats{Time: mt, MaxPID: ptrTo(int64(maxPID))}
	// /proc/loadavg's fourth field is running/total scheduling entities.
	if data, err := os.ReadFile(filepath.Join(p.cfg.ProcRoot, "loadavg")); err == nil {
		if f := strings.Fields(string(data)); len(f) >= 4 {
			if _, tot, ok := strings.Cut(f[3], "/"); ok {
				if n, err := strconv.ParseInt(tot, 10, 64); err == nil {
					out.NumOfRunningProcesses = &n
				}
			}
		}
	}
	return out
}

// bootTime is /proc/stat's btime, now when unknown.
func (p *Provider) bootTime(st promprocfs.Stat, ok bool, now time.Time) time.Time {
	if ok && st.BootTime != 0 {
		return time.Unix(int64(st.BootTime), 0)
	}
	return now
}

// meminfo returns /proc/meminfo in bytes (empty when unreadable).
func (p *Provider) meminfo() map[string]uint64 {
	data, err := os.ReadFile(filepath.Join(p.cfg.ProcRoot, "meminfo"))
	if err != nil {
		return map[string]uint64{}
	}
	return procfs.ParseMeminfo(data)
}

func readUint(path string) (uint64, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return parseUint(data)
}

// parseUint parses a one-number file (memory.current, pids.current).
func parseUint(data []byte) (uint64, error) {
	return strconv.ParseUint(strings.TrimSpace(string(data)), 10, 64)
}

// readKV reads "key value" lines (memory.stat, /proc/stat); unparsable lines are skipped.
func readKV(path string) map[string]uint64 {
	data, err := os.ReadFile(path)
	if err != nil {
		return map[string]uint64{}
	}
	return parseKV(data)
}

// parseKV parses "key value" lines (memory.stat, cpu.stat, memory.events);
// unparsable lines are skipped.
func parseKV(data []byte) map[string]uint64 {
	out := map[string]uint64{}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) != 2 {
			continue
		}
		if n, err := strconv.ParseUint(f[1], 10, 64); err == nil {
			out[f[0]] = n
		}
	}
	return out
}

func satSub(a, b uint64) uint64 {
	if b > a {
		return 0
	}
	return a - b
}
