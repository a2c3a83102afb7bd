package stats

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/nodelet/nodelet/cgroups"
)

// CgroupStats is one cgroup reading (v2, or v1's controllers) in the units cAdvisor
// reports (bytes, nanoseconds), for /metrics/cadvisor. A nil field was not readable.
type CgroupStats struct {
	// Path is the cgroup's path in the cgroup filesystem (cAdvisor's id label).
	Path string
	// CPUUsageNanos is cpu.stat usage_usec in nanoseconds (v1: cpuacct.usage).
	CPUUsageNanos *uint64
	// CFS is set only when cpu.max (v1: cpu.cfs_quota_us) has a quota: cAdvisor
	// reports throttling only for containers with a CPU limit.
	CFS    *CFSStats
	Memory *CgroupMemoryStats
	// OOMKills is memory.events oom_kill (the cgroup and its descendants; v1:
	// memory.oom_control oom_kill).
	OOMKills *uint64
	IO       []DeviceIO
	// Processes counts the pids in cgroup.procs (of the cgroup and, for a pod,
	// of its children), as cAdvisor counts processes, not pids.current's threads.
	Processes *uint64
}

// CFSStats are cpu.stat's bandwidth counters.
type CFSStats struct {
	Periods, ThrottledPeriods, ThrottledNanos uint64
}

// CgroupMemoryStats is memory.current and memory.stat as cAdvisor maps them on
// cgroup v2: RSS is anon, cache is file, the working set is usage minus
// inactive_file. On v1: memory.usage_in_bytes, RSS total_rss and cache
// total_cache (rss and cache without memory.use_hierarchy), the working set
// usage minus total_inactive_file.
type CgroupMemoryStats struct {
	Usage, WorkingSet, RSS, Cache uint64
	// Swap is memory.swap.current (v1: memory.stat total_swap); nil without
	// swap accounting.
	Swap *uint64
}

// DeviceIO is one io.stat line.
type DeviceIO struct {
	// Device is /dev/<name> as cAdvisor labels it, or "major:minor" when the
	// device has no name under /sys/dev/block.
	Device                string
	ReadBytes, WriteBytes uint64
}

// PodCgroups is a pod's cgroup readings and its containers'.
type PodCgroups struct {
	Pod       statsapi.PodReference
	StartTime time.Time
	Cgroup    CgroupStats
	// Network is the sandbox's network namespace (from the runtime, else
	// /proc/<pid>/net/dev of a process in the pod); nil with host networking.
	Network []statsapi.InterfaceStats
	// Sandbox is the pause container's cgroup (the child named for the
	// sandbox's ID) and image, nil when the pod cgroup has none: cAdvisor
	// reports it as a container of its own, with the pod's network.
	Sandbox    *ContainerCgroup
	Containers []ContainerCgroup
}

// ContainerCgroup is a running container's cgroup reading and identity.
type ContainerCgroup struct {
	ID, Name, Image string
	StartTime       time.Time
	Cgroup          CgroupStats
	// RootfsBytes is the writable layer's usage from the runtime, on RootfsDevice.
	RootfsBytes  *uint64
	RootfsDevice string
}

// cgroupReader reads cgroup files below the cgroup filesystem's root (on v1,
// below each controller's hierarchy). Every path is resolved one component at
// a time from the root's descriptor with O_NOFOLLOW (dirFD), as cgroup
// directory names come from the runtime's container IDs: nothing leads outside
// the root and no symlink is followed.
type cgroupReader struct {
	// root is the v2 filesystem; on v1 the hierarchy whose directories are
	// listed for a pod's children and their cgroup.procs (memory's, else pids',
	// else cpuacct's).
	root dirFD
	// v1 are the controllers' hierarchies on cgroup v1; nil on v2.
	v1       *v1Hierarchies
	procRoot string
	sysRoot  string
	// devNames memoizes device names by "major:minor" for one measurement.
	devNames map[string]string
}

// v1Hierarchies are the roots of the cgroup v1 controllers cAdvisor reads, -1
// when one is not mounted. cpu and cpuacct are usually one hierarchy
// (cpu,cpuacct): then they are the same descriptor.
type v1Hierarchies struct {
	cpuacct, cpu, memory, pids, blkio dirFD
}

// v1Dirs are the directory names a v1 controller's hierarchy may have under
// the cgroup filesystem's root (the combined mount first; the short names are
// usually symlinks to it).
var v1Dirs = map[string][]string{
	"cpuacct": {"cpu,cpuacct", "cpuacct,cpu", "cpuacct"},
	"cpu":     {"cpu,cpuacct", "cpuacct,cpu", "cpu"},
	"memory":  {"memory"},
	"pids":    {"pids"},
	"blkio":   {"blkio"},
}

func newCgroupReader(cgroupRoot, procRoot, sysRoot string, unified bool) (*cgroupReader, error) {
	r := &cgroupReader{root: -1, procRoot: procRoot, sysRoot: sysRoot, devNames: map[string]string{}}
	if unified {
		fd, err := unix.Open(cgroupRoot, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("opening the cgroup filesystem %s: %w", cgroupRoot, err)
		}
		r.root = dirFD(fd)
		return r, nil
	}
	// The hierarchies' own directories are the system's mounts, not names from
	// pods: they are opened by path.
	open := func(controller string) dirFD {
		for _, name := range v1Dirs[controller] {
			if fd, err := unix.Open(cgroupRoot+"/"+name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err == nil {
				return dirFD(fd)
			}
		}
		return -1
	}
	h := &v1Hierarchies{cpuacct: open("cpuacct"), memory: open("memory"), pids: open("pids"), blkio: open("blkio")}
	h.cpu = h.cpuacct
	if !sameDir(h.cpu, v1Dirs["cpu"], cgroupRoot) {
		h.cpu = open("cpu")
	}
	r.v1 = h
	for _, d := range []dirFD{h.memory, h.pids, h.cpuacct} {
		if d >= 0 {
			r.root = d
			break
		}
	}
	if r.root < 0 {
		r.Close()
		return nil, fmt.Errorf("no cgroup v1 memory, pids or cpuacct hierarchy under %s", cgroupRoot)
	}
	return r, nil
}

// sameDir says whether d is also the hierarchy of the first of names that
// exists under root (cpu and cpuacct mounted together).
func sameDir(d dirFD, names []string, root string) bool {
	if d < 0 {
		return false
	}
	var a unix.Stat_t
	if unix.Fstat(int(d), &a) != nil {
		return false
	}
	for _, name := range names {
		var b unix.Stat_t
		if unix.Stat(root+"/"+name, &b) == nil {
			return a.Dev == b.Dev && a.Ino == b.Ino
		}
	}
	return false
}

func (r *cgroupReader) Close() error {
	if h := r.v1; h != nil {
		seen := map[dirFD]bool{}
		for _, d := range []dirFD{h.cpuacct, h.cpu, h.memory, h.pids, h.blkio} {
			if d >= 0 && !seen[d] {
				seen[d] = true
				d.Close()
			}
		}
		return nil
	}
	return r.root.Close()
}

// dirFD is an open directory whose entries are opened by name, relative to
// it, with O_NOFOLLOW: one lookup a file (resolving each file's whole path
// from the root cost several times the reads themselves) and no symlinks.
type dirFD int

// openPath opens the directory at the slash-separated path p below d, one
// component at a time; p is cleaned first, so ".." never reaches the kernel.
func (d dirFD) openPath(p string) (dirFD, error) {
	cur := d
	for _, c := range strings.Split(strings.TrimPrefix(path.Clean("/"+p), "/"), "/") {
		if c == "" {
			c = "."
		}
		next, err := cur.open(c)
		if cur != d {
			cur.Close()
		}
		if err != nil {
			return -1, fmt.Errorf("opening cgroup %s: %w", p, err)
		}
		cur = next
	}
	return cur, nil
}

// open opens the directory name in d.
func (d dirFD) open(name string) (dirFD, error) {
	fd, err := unix.Openat(int(d), name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, &os.PathError{Op: "openat", Path: name, Err: err}
	}
	return dirFD(fd), nil
}

// ReadFile reads the file name in d (cgroup files are small: a few reads).
func (d dirFD) ReadFile(name string) ([]byte, error) {
	fd, err := unix.Openat(int(d), name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "openat", Path: name, Err: err}
	}
	defer unix.Close(fd)
	buf := make([]byte, 0, 1024)
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := unix.Read(fd, buf[len(buf):cap(buf)])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, &os.PathError{Op: "read", Path: name, Err: err}
		}
		if n == 0 {
			return buf, nil
		}
		buf = buf[:len(buf)+n]
	}
}

// ReadDir lists d.
func (d dirFD) ReadDir() ([]os.DirEntry, error) {
	fd, err := unix.Openat(int(d), ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "openat", Path: ".", Err: err}
	}
	f := os.NewFile(uintptr(fd), ".")
	defer f.Close()
	return f.ReadDir(-1)
}

func (d dirFD) Close() error { return unix.Close(int(d)) }

// read reads the cgroup whose directory is dir and whose path is
// cgroupPath; ok is false when it has neither cpu.stat nor memory.current
// (gone, or not a cgroup). Files are opened relative to dir, one lookup each:
// resolving the whole path in the root for every file cost 15x the reads.
func (r *cgroupReader) read(dir dirFD, cgroupPath string) (CgroupStats, bool) {
	if r.v1 != nil {
		return r.readV1(dir, cgroupPath)
	}
	s := CgroupStats{Path: cgroupPath}
	ok := false
	if data, err := dir.ReadFile("cpu.stat"); err == nil {
		ok = true
		kv := parseKV(data)
		if v, found := kv["usage_usec"]; found {
			s.CPUUsageNanos = ptrTo(v * 1000)
		}
		if max, err := dir.ReadFile("cpu.max"); err == nil {
			if f := strings.Fields(string(max)); len(f) > 0 && f[0] != "max" {
				s.CFS = &CFSStats{Periods: kv["nr_periods"], ThrottledPeriods: kv["nr_throttled"], ThrottledNanos: kv["throttled_usec"] * 1000}
			}
		}
	}
	if data, err := dir.ReadFile("memory.current"); err == nil {
		if usage, err := parseUint(data); err == nil {
			ok = true
			var st map[string]uint64
			if data, err := dir.ReadFile("memory.stat"); err == nil {
				st = parseKV(data)
			}
			m := &CgroupMemoryStats{Usage: usage, WorkingSet: satSub(usage, st["inactive_file"]), RSS: st["anon"], Cache: st["file"]}
			if data, err := dir.ReadFile("memory.swap.current"); err == nil {
				if v, err := parseUint(data); err == nil {
					m.Swap = &v
				}
			}
			s.Memory = m
		}
	}
	if data, err := dir.ReadFile("memory.events"); err == nil {
		if v, found := parseKV(data)["oom_kill"]; found {
			s.OOMKills = &v
		}
	}
	if data, err := dir.ReadFile("io.stat"); err == nil {
		s.IO = r.parseIOStat(data)
	}
	if pids, err := procs(dir); err == nil {
		s.Processes = ptrTo(uint64(len(pids)))
	}
	return s, ok
}

// readV1 reads the cgroup at cgroupPath in each v1 controller's hierarchy as
// cAdvisor does (through runc's cgroup v1 stats); dir is it in r.root's
// hierarchy, whose cgroup.procs count the processes. ok is false when neither
// cpuacct.usage nor memory.usage_in_bytes is readable.
func (r *cgroupReader) readV1(dir dirFD, cgroupPath string) (CgroupStats, bool) {
	s := CgroupStats{Path: cgroupPath}
	ok := false
	h := r.v1
	// in runs fn on the cgroup's directory in hierarchy root, if it has one.
	in := func(root dirFD, fn func(d dirFD)) {
		if root < 0 {
			return
		}
		d, err := root.openPath(cgroupPath)
		if err != nil {
			return
		}
		defer d.Close()
		fn(d)
	}
	in(h.cpuacct, func(d dirFD) {
		if data, err := d.ReadFile("cpuacct.usage"); err == nil {
			if v, err := parseUint(data); err == nil {
				s.CPUUsageNanos, ok = &v, true
			}
		}
	})
	in(h.cpu, func(d dirFD) {
		data, err := d.ReadFile("cpu.cfs_quota_us")
		if err != nil {
			return
		}
		// -1: no quota.
		if q, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64); err != nil || q <= 0 {
			return
		}
		if data, err := d.ReadFile("cpu.stat"); err == nil {
			kv := parseKV(data)
			s.CFS = &CFSStats{Periods: kv["nr_periods"], ThrottledPeriods: kv["nr_throttled"], ThrottledNanos: kv["throttled_time"]}
		}
	})
	in(h.memory, func(d dirFD) {
		data, err := d.ReadFile("memory.usage_in_bytes")
		if err != nil {
			return
		}
		usage, err := parseUint(data)
		if err != nil {
			return
		}
		ok = true
		var st map[string]uint64
		if data, err := d.ReadFile("memory.stat"); err == nil {
			st = parseKV(data)
		}
		// As cAdvisor: the hierarchy's totals when memory.use_hierarchy is on, but
		// the working set always subtracts total_inactive_file.
		prefix := ""
		if data, err := d.ReadFile("memory.use_hierarchy"); err == nil && strings.TrimSpace(string(data)) == "1" {
			prefix = "total_"
		}
		m := &CgroupMemoryStats{Usage: usage, WorkingSet: satSub(usage, st["total_inactive_file"]), RSS: st[prefix+"rss"], Cache: st[prefix+"cache"]}
		if v, found := st[prefix+"swap"]; found {
			m.Swap = &v
		}
		s.Memory = m
		if data, err := d.ReadFile("memory.oom_control"); err == nil {
			if v, found := parseKV(data)["oom_kill"]; found {
				s.OOMKills = &v
			}
		}
	})
	in(h.blkio, func(d dirFD) { s.IO = r.readBlkio(d) })
	if pids, err := procs(dir); err == nil {
		s.Processes = ptrTo(uint64(len(pids)))
	}
	return s, ok
}

// readBlkio reads a v1 blkio cgroup's bytes per device as runc does: the
// CFQ/BFQ scheduler's blkio.io_service_bytes_recursive when it has entries,
// else the throttling layer's (recursive, else its own).
func (r *cgroupReader) readBlkio(d dirFD) []DeviceIO {
	for _, name := range []string{"blkio.io_service_bytes_recursive", "blkio.throttle.io_service_bytes_recursive", "blkio.throttle.io_service_bytes"} {
		data, err := d.ReadFile(name)
		if err != nil {
			continue
		}
		if io := r.parseBlkio(data); len(io) > 0 {
			return io
		}
	}
	return nil
}

// parseBlkio parses "MAJ:MIN Op N" lines (Read, Write, Sync, Async, Discard,
// Total) and a final "Total N", in the devices' order of first appearance.
func (r *cgroupReader) parseBlkio(data []byte) []DeviceIO {
	var out []DeviceIO
	idx := map[string]int{}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 || (f[1] != "Read" && f[1] != "Write") {
			continue
		}
		n, err := strconv.ParseUint(f[2], 10, 64)
		if err != nil {
			continue
		}
		i, seen := idx[f[0]]
		if !seen {
			i = len(out)
			idx[f[0]] = i
			out = append(out, DeviceIO{Device: r.deviceName(f[0])})
		}
		if f[1] == "Read" {
			out[i].ReadBytes = n
		} else {
			out[i].WriteBytes = n
		}
	}
	return out
}

func procs(dir dirFD) ([]int, error) {
	data, err := dir.ReadFile("cgroup.procs")
	if err != nil {
		return nil, err
	}
	return cgroups.ParseProcs(data), nil
}

// parseIOStat parses io.stat lines: "MAJ:MIN rbytes=N wbytes=N rios=N ...".
func (r *cgroupReader) parseIOStat(data []byte) []DeviceIO {
	var out []DeviceIO
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		d := DeviceIO{Device: r.deviceName(f[0])}
		for _, kv := range f[1:] {
			k, v, _ := strings.Cut(kv, "=")
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				continue
			}
			switch k {
			case "rbytes":
				d.ReadBytes = n
			case "wbytes":
				d.WriteBytes = n
			}
		}
		out = append(out, d)
	}
	return out
}

// deviceName names a block device "major:minor" as /dev/<DEVNAME> from
// /sys/dev/block/<major:minor>/uevent, as cAdvisor labels disks.
func (r *cgroupReader) deviceName(majMin string) string {
	if n, ok := r.devNames[majMin]; ok {
		return n
	}
	name := majMin
	maj, min, found := strings.Cut(majMin, ":")
	_, err1 := strconv.ParseUint(maj, 10, 32)
	_, err2 := strconv.ParseUint(min, 10, 32)
	// Only numbers go into the path.
	if found && err1 == nil && err2 == nil {
		if data, err := os.ReadFile(r.sysRoot + "/dev/block/" + majMin + "/uevent"); err == nil {
			for _, l := range strings.Split(string(data), "\n") {
				if v, ok := strings.CutPrefix(l, "DEVNAME="); ok && v != "" {
					name = "/dev/" + v
				}
			}
		}
	}
	r.devNames[majMin] = name
	return name
}

// netDev reads the interfaces of pid's network namespace, leaving out those
// cAdvisor ignores (loopback, the host ends of veth pairs).
func (r *cgroupReader) netDev(pid int) ([]statsapi.InterfaceStats, error) {
	data, err := os.ReadFile(r.procRoot + "/" + strconv.Itoa(pid) + "/net/dev")
	if err != nil {
		return nil, fmt.Errorf("reading the network devices of process %d: %w", pid, err)
	}
	return parseNetDev(data), nil
}

// parseNetDev parses /proc/<pid>/net/dev: two header lines, then
// "name: rx_bytes rx_packets rx_errs rx_drop ... tx_bytes tx_packets tx_errs ...".
func parseNetDev(data []byte) []statsapi.InterfaceStats {
	var out []statsapi.InterfaceStats
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		name = strings.TrimSpace(name)
		f := strings.Fields(rest)
		if len(f) < 16 || name == "lo" || strings.HasPrefix(name, "veth") {
			continue
		}
		n := func(i int) *uint64 {
			v, err := strconv.ParseUint(f[i], 10, 64)
			if err != nil {
				return nil
			}
			return &v
		}
		out = append(out, statsapi.InterfaceStats{Name: name, RxBytes: n(0), RxErrors: n(2), TxBytes: n(8), TxErrors: n(10)})
	}
	return out
}

// containerCgroupID is the container ID a pod cgroup's child directory is
// named for: "<id>" (cgroupfs driver), "cri-containerd-<id>.scope",
// "crio-<id>.scope" or "docker-<id>.scope" (systemd driver).
func containerCgroupID(dirName string) string {
	id := strings.TrimSuffix(dirName, ".scope")
	for _, p := range []string{"cri-containerd-", "crio-", "docker-"} {
		if s, ok := strings.CutPrefix(id, p); ok {
			return s
		}
	}
	return id
}

// podCgroupInput is what podCgroups needs about one pod.
type podCgroupInput struct {
	ref       statsapi.PodReference
	start     time.Time
	dir       string // the pod cgroup's path
	sandboxID string
	// sandboxImage is the runtime's pause image.
	sandboxImage string
	hostNet      bool
	network      *statsapi.NetworkStats // from the runtime, if it measured it
	containers   map[string]ContainerCgroup
}

// podCgroups reads a pod's cgroup and its running containers' (the children
// named for their IDs) and, unless the pod uses the host's network or the
// runtime measured it, the network of the sandbox's namespace.
func (r *cgroupReader) podCgroups(in podCgroupInput) (PodCgroups, bool) {
	pc := PodCgroups{Pod: in.ref, StartTime: in.start}
	podDir, err := r.root.openPath(in.dir)
	if err != nil {
		return pc, false
	}
	defer podDir.Close()
	st, ok := r.read(podDir, in.dir)
	if !ok {
		return pc, false
	}
	pc.Cgroup = st
	entries, err := podDir.ReadDir()
	if err != nil {
		return pc, true
	}
	nprocs := deref(st.Processes)
	netPID := 0
	netDir := dirFD(-1) // a container's, when no other process is found
	defer func() {
		if netDir >= 0 {
			netDir.Close()
		}
	}()
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		child, err := podDir.open(e.Name())
		if err != nil {
			continue
		}
		id := containerCgroupID(e.Name())
		if c, known := in.containers[id]; known {
			if cs, ok := r.read(child, path.Join(in.dir, e.Name())); ok {
				c.Cgroup = cs
				nprocs += deref(cs.Processes)
				pc.Containers = append(pc.Containers, c)
				if netDir < 0 && deref(cs.Processes) > 0 {
					netDir, child = child, -1
				}
			}
			if child >= 0 {
				child.Close()
			}
			continue
		}
		if id == in.sandboxID {
			// The pause container: a container series of its own, as cAdvisor's
			// containerd and CRI-O handlers report the sandbox.
			if cs, ok := r.read(child, path.Join(in.dir, e.Name())); ok {
				pc.Sandbox = &ContainerCgroup{ID: id, StartTime: in.start, Cgroup: cs}
			}
		}
		pids, err := procs(child)
		child.Close()
		if err != nil {
			continue
		}
		nprocs += uint64(len(pids))
		// The sandbox's process holds the pod's network namespace.
		if len(pids) > 0 && (netPID == 0 || id == in.sandboxID) {
			netPID = pids[0]
		}
	}
	pc.Cgroup.Processes = &nprocs
	switch {
	case in.hostNet:
	case in.network != nil && len(in.network.Interfaces) > 0:
		pc.Network = in.network.Interfaces
	case in.network != nil && in.network.Name != "":
		pc.Network = []statsapi.InterfaceStats{in.network.InterfaceStats}
	default:
		if netPID == 0 && netDir >= 0 {
			if pids, err := procs(netDir); err == nil && len(pids) > 0 {
				netPID = pids[0]
			}
		}
		if netPID != 0 {
			if ifs, err := r.netDev(netPID); err == nil {
				pc.Network = ifs
			}
		}
	}
	return pc, true
}

// imageOf is a container's image as cAdvisor labels it: the name the pod
// asked for, else what the runtime reports.
func imageOf(pod *v1.Pod, container, userSpecified, runtimeImage string) string {
	if pod != nil {
		for _, c := range pod.Spec.Containers {
			if c.Name == container {
				return c.Image
			}
		}
		for _, c := range pod.Spec.InitContainers {
			if c.Name == container {
				return c.Image
			}
		}
	}
	if userSpecified != "" {
		return userSpecified
	}
	return runtimeImage
}
