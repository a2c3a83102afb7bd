package cgroups

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	occgroups "github.com/opencontainers/cgroups"
	cgroupsv1 "github.com/opencontainers/cgroups/fs"
	"github.com/opencontainers/cgroups/fs2"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
)

// ManagerOptions configure the QoS and pod cgroup manager.
type ManagerOptions struct {
	// Driver is the cgroup driver (cgroupfs if empty). With systemd, Systemd must be set.
	Driver Driver
	// Systemd is systemd's D-Bus unit API, for the systemd driver.
	Systemd SystemdUnits
	// Root is where the cgroup filesystems are mounted (DefaultRoot if empty).
	Root string
	// Mode is the host layout (DetectMode).
	Mode Mode
	// CgroupRoot is the parsed cgroupRoot setting (ParseCgroupRoot).
	CgroupRoot CgroupName
	// EnforceNodeAllocatable: with "pods", kubepods is limited to allocatable.
	EnforceNodeAllocatable []string
	// PodPidsLimit (podPidsLimit): > 0 sets pids.max on every pod cgroup.
	PodPidsLimit int64
	// CPUCFSQuota and CPUCFSQuotaPeriod (0 = 100ms) as in the kubelet config.
	CPUCFSQuota       bool
	CPUCFSQuotaPeriod time.Duration
}

// Manager creates and removes the QoS and pod cgroups. It sets their resources
// through opencontainers/cgroups' fs (v1) and fs2 (v2) managers, given explicit
// directories below Root; with the systemd driver the cgroups are slices that
// systemd creates first (see systemd.go). doc.go lists what is still written by
// hand and why.
type Manager struct {
	opts ManagerOptions
	// removeDir removes one empty cgroup directory; os.Remove on the real cgroupfs.
	removeDir func(string) error
	// mkdirAll creates a cgroup directory and its parents; os.MkdirAll on the real
	// cgroupfs, where the kernel fills in the interface files.
	mkdirAll func(string) error
}

// v1 hierarchies a cgroup is created in, when mounted (as runc's cgroupfs manager does).
var v1Hierarchies = []string{"cpu", "cpuacct", "cpuset", "memory", "pids", "hugetlb", "blkio", "devices", "freezer", "net_cls", "net_prio", "perf_event", "rdma", "misc"}

// v2 controllers nodelet enables for its subtree when the root offers them.
var v2Controllers = []string{"cpuset", "cpu", "io", "memory", "hugetlb", "pids"}

// NewManager checks the options; it touches nothing.
func NewManager(opts ManagerOptions) (*Manager, error) {
	if opts.Root == "" {
		opts.Root = DefaultRoot
	}
	switch opts.Mode {
	case ModeV1, ModeHybrid, ModeV2:
	default:
		return nil, fmt.Errorf("creating cgroup manager: cgroup mode %v is not supported", opts.Mode)
	}
	switch opts.Driver {
	case "":
		opts.Driver = DriverCgroupfs
	case DriverCgroupfs:
	case DriverSystemd:
		if opts.Systemd == nil {
			return nil, errors.New("creating cgroup manager: the systemd driver needs a connection to systemd")
		}
	default:
		return nil, fmt.Errorf("creating cgroup manager: cgroup driver %q is not supported", opts.Driver)
	}
	return &Manager{opts: opts, removeDir: os.Remove, mkdirAll: func(dir string) error { return os.MkdirAll(dir, 0o755) }}, nil
}

func (m *Manager) periodMicros() int64 {
	return ResourceOptions{Period: m.opts.CPUCFSQuotaPeriod}.PeriodMicros()
}

// EnsureQOSCgroups creates kubepods, kubepods/burstable and kubepods/besteffort.
// kubepods gets memory, cpu shares and pids from allocatable (capacity minus
// kube/system reserved, without eviction thresholds) when enforceNodeAllocatable
// has "pods", from capacity otherwise; besteffort gets the minimum cpu shares.
func (m *Manager) EnsureQOSCgroups(ctx context.Context, capacity, allocatable v1.ResourceList) error {
	rl := capacity
	if slices.Contains(m.opts.EnforceNodeAllocatable, "pods") {
		rl = allocatable
	}
	kubepods := KubepodsCgroupName(m.opts.CgroupRoot)
	if err := m.ensure(ctx, kubepods, NodeResourceConfig(rl)); err != nil {
		return err
	}
	if err := m.ensure(ctx, QOSCgroupName(m.opts.CgroupRoot, v1.PodQOSBurstable), ResourceConfig{}); err != nil {
		return err
	}
	min := uint64(MinShares)
	return m.ensure(ctx, QOSCgroupName(m.opts.CgroupRoot, v1.PodQOSBestEffort), ResourceConfig{CPUShares: &min})
}

// UpdateQOSCgroups sets burstable's cpu shares to the summed cpu requests of the
// active Burstable pods (and besteffort's back to the minimum), so burstable pods
// as a whole get their share against Guaranteed ones.
func (m *Manager) UpdateQOSCgroups(ctx context.Context, activePods []*v1.Pod) error {
	var milli int64
	for _, p := range activePods {
		if QOSClass(p) == v1.PodQOSBurstable {
			q, _ := podAggregate(p, requestsOf, v1.ResourceCPU, false)
			milli += q.MilliValue()
		}
	}
	burstable := MilliCPUToShares(milli)
	if err := m.update(ctx, QOSCgroupName(m.opts.CgroupRoot, v1.PodQOSBurstable), ResourceConfig{CPUShares: &burstable}); err != nil {
		return err
	}
	min := uint64(MinShares)
	return m.update(ctx, QOSCgroupName(m.opts.CgroupRoot, v1.PodQOSBestEffort), ResourceConfig{CPUShares: &min})
}

// EnsurePodCgroup creates the pod's cgroup (or updates it) with PodResourceConfig.
func (m *Manager) EnsurePodCgroup(ctx context.Context, pod *v1.Pod) error {
	name := PodCgroupName(m.opts.CgroupRoot, pod)
	return m.ensure(ctx, name, PodResourceConfig(pod, m.opts.CPUCFSQuota, m.periodMicros(), m.opts.PodPidsLimit))
}

// PodCgroupExists reports whether the pod's cgroup is there (in the memory
// hierarchy on v1).
func (m *Manager) PodCgroupExists(pod *v1.Pod) bool {
	return isDir(m.primaryPath(PodCgroupName(m.opts.CgroupRoot, pod)))
}

// RemovePodCgroup removes the pod's cgroup from every hierarchy. It refuses while
// processes remain in it: the pod's containers must be stopped first.
func (m *Manager) RemovePodCgroup(ctx context.Context, pod *v1.Pod) error {
	return m.RemoveCgroup(ctx, PodCgroupName(m.opts.CgroupRoot, pod))
}

// RemoveCgroup removes one cgroup (a pod cgroup found by ListPodCgroups) with the
// cgroups below it (the containers' ones the runtime left) from every hierarchy that
// has it, deepest first. It removes nothing while any process is in it or below it.
func (m *Manager) RemoveCgroup(ctx context.Context, name CgroupName) error {
	if m.opts.Driver == DriverSystemd {
		return m.removeSlice(ctx, name)
	}
	dirs, err := m.allPaths(name)
	if err != nil {
		return fmt.Errorf("removing cgroup %s: %w", m.FsPath(name), err)
	}
	if err := refuseBusy(m.FsPath(name), dirs); err != nil {
		return err
	}
	if err := m.removeTrees(dirs); err != nil {
		return err
	}
	klog.FromContext(ctx).V(4).Info("Removed cgroup", "cgroup", m.FsPath(name))
	return nil
}

// refuseBusy fails, naming each cgroup and its processes, when any process is in one
// of dirs or below it: removing such a cgroup would fail half-way, or (systemd) kill it.
func refuseBusy(fsPath string, dirs []string) error {
	var busy []string
	for _, dir := range dirs {
		_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return nil // not there in this hierarchy, or gone meanwhile
			}
			if d.IsDir() {
				if pids := readProcs(p); len(pids) > 0 {
					busy = append(busy, fmt.Sprintf("%s: processes %v", p, pids))
				}
			}
			return nil
		})
	}
	if len(busy) > 0 {
		return fmt.Errorf("removing cgroup %s: processes still in it or below it (stop them first): %s", fsPath, strings.Join(busy, "; "))
	}
	return nil
}

// removeTrees removes each of dirs with every cgroup below it, children before their
// parent (rmdir on cgroupfs refuses a cgroup with child cgroups). Missing ones are
// no error.
func (m *Manager) removeTrees(dirs []string) error {
	var errs []error
	for _, dir := range dirs {
		var tree []string
		err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			if err != nil {
				return err
			}
			if d.IsDir() {
				tree = append(tree, p)
			}
			return nil
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("listing the cgroups below %s: %w", dir, err))
			continue
		}
		// WalkDir visits a directory before its children: backwards is deepest first.
		for i := len(tree) - 1; i >= 0; i-- {
			if err := m.removeDir(tree[i]); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, fmt.Errorf("removing cgroup %s: %w", tree[i], err))
				break // its parent cannot go either
			}
		}
	}
	return errors.Join(errs...)
}

// ListPodCgroups returns the pod cgroups present under the QoS cgroups, by pod UID,
// so housekeeping can remove those of pods that are gone. It looks in every
// hierarchy: on a hybrid host the runtime leaves pod cgroups behind in name=systemd
// and the unified hierarchy that the controllers no longer have.
func (m *Manager) ListPodCgroups() (map[types.UID]CgroupName, error) {
	hierarchies, err := Hierarchies(m.opts.Root, m.opts.Mode)
	if err != nil {
		return nil, fmt.Errorf("listing pod cgroups: %w", err)
	}
	out := map[types.UID]CgroupName{}
	for _, h := range hierarchies {
		for _, qos := range []v1.PodQOSClass{v1.PodQOSGuaranteed, v1.PodQOSBurstable, v1.PodQOSBestEffort} {
			parent := QOSCgroupName(m.opts.CgroupRoot, qos)
			entries, err := os.ReadDir(filepath.Join(h, m.FsPath(parent)))
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("listing pod cgroups: %w", err)
			}
			for _, e := range entries {
				if !e.IsDir() {
					continue
				}
				if m.opts.Driver == DriverSystemd {
					if uid, ok := podUIDFromSlice(parent, e.Name()); ok {
						out[uid] = parent.Child(podPrefix + string(uid))
					}
					continue
				}
				if strings.HasPrefix(e.Name(), podPrefix) {
					out[types.UID(strings.TrimPrefix(e.Name(), podPrefix))] = parent.Child(e.Name())
				}
			}
		}
	}
	return out, nil
}

// FsPath is where the cgroup lives below a hierarchy's mount point for the manager's
// driver: "/kubepods/burstable" with cgroupfs, the nested slices
// "/kubepods.slice/kubepods-burstable.slice" with systemd. Readers of cgroup files
// (stats) use it.
func (m *Manager) FsPath(name CgroupName) string { return FsPath(name, m.opts.Driver) }

// FsPath is the cgroup's path below a hierarchy's mount point for driver d.
func FsPath(name CgroupName, d Driver) string {
	if d == DriverSystemd && len(name) > 0 {
		return "/" + name.Systemd()
	}
	return name.Cgroupfs()
}

// primaryPath is the directory that stands for the cgroup when checking existence.
func (m *Manager) primaryPath(name CgroupName) string { return m.primaryDir(m.FsPath(name)) }

func (m *Manager) primaryDir(fsPath string) string {
	if m.opts.Mode == ModeV2 {
		return filepath.Join(m.opts.Root, fsPath)
	}
	return filepath.Join(m.opts.Root, "memory", fsPath)
}

// paths are the cgroup's directories: one per mounted v1 hierarchy, or one on v2.
func (m *Manager) paths(name CgroupName) []string {
	return Dirs(m.opts.Root, m.opts.Mode, m.FsPath(name))
}

// allPaths are the cgroup's directories in every hierarchy (see Hierarchies), which
// is where removal and listing look: the runtime creates container cgroups in
// hierarchies nodelet does not write to.
func (m *Manager) allPaths(name CgroupName) ([]string, error) {
	hierarchies, err := Hierarchies(m.opts.Root, m.opts.Mode)
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(hierarchies))
	for _, h := range hierarchies {
		out = append(out, filepath.Join(h, m.FsPath(name)))
	}
	return out, nil
}

// Hierarchies are the mount points of the cgroup hierarchies under root: root itself
// on v2; on v1 and hybrid every directory of root, which is every hierarchy mounted
// there: the controllers, named ones such as name=systemd and hybrid's cgroup2
// "unified" (runc creates a container's cgroup in all of them). Links (cpu ->
// cpu,cpuacct) are skipped: what they lead to is a directory of root too.
func Hierarchies(root string, mode Mode) ([]string, error) {
	if mode == ModeV2 {
		return []string{root}, nil
	}
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil, fmt.Errorf("listing the cgroup hierarchies under %s: %w", root, err)
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() {
			out = append(out, filepath.Join(root, e.Name()))
		}
	}
	return out, nil
}

// Dirs are the directories of the cgroup at fsPath under root (normally
// /sys/fs/cgroup): one on v2, one per mounted v1 hierarchy.
func Dirs(root string, mode Mode, fsPath string) []string {
	if mode == ModeV2 {
		return []string{filepath.Join(root, fsPath)}
	}
	var out []string
	seen := map[string]bool{}
	for _, h := range v1Hierarchies {
		base := filepath.Join(root, h)
		if !isDir(base) {
			continue
		}
		// cpu and cpuacct are often links to one "cpu,cpuacct" hierarchy.
		if real, err := filepath.EvalSymlinks(base); err == nil {
			if seen[real] {
				continue
			}
			seen[real] = true
		}
		out = append(out, filepath.Join(base, fsPath))
	}
	return out
}

func (m *Manager) ensure(ctx context.Context, name CgroupName, rc ResourceConfig) error {
	if m.opts.Driver == DriverSystemd {
		// systemd creates the slice (and knows its limits); the library's fs/fs2
		// managers then make the file values exact and cover what systemd leaves
		// alone (cpuset on v1).
		if err := m.ensureSlice(ctx, name, rc); err != nil {
			return err
		}
	}
	fsPath := m.FsPath(name)
	res := libResources(rc, m.opts.Mode == ModeV2)
	lib, err := m.libManager(fsPath, res)
	if err != nil {
		return err
	}
	if m.opts.Mode == ModeV2 {
		// By hand: fs2's Apply (CreateCgroupPath) only works below /sys/fs/cgroup
		// and enables every controller the root offers, nodelet only its own.
		if err := m.enableControllers(name); err != nil {
			return err
		}
		dir := filepath.Join(m.opts.Root, fsPath)
		if err := m.mkdirAll(dir); err != nil {
			return fmt.Errorf("creating cgroup %s: %w", dir, err)
		}
	} else {
		// Every mounted hierarchy, devices included: the library skips devices
		// (SkipDevices, as the kubelet sets it) but the runtime nests there.
		for _, dir := range m.paths(name) {
			if err := m.mkdirAll(dir); err != nil {
				return fmt.Errorf("creating cgroup %s: %w", dir, err)
			}
		}
		// Apply(-1) creates the directories without moving a process, and on
		// cpuset copies cpuset.cpus/mems down from the parent: a new v1 cpuset
		// cgroup starts empty and no task could join it or its children.
		if err := lib.Apply(-1); err != nil {
			return fmt.Errorf("creating cgroup %s: %w", fsPath, err)
		}
	}
	if err := lib.Set(res); err != nil {
		return fmt.Errorf("setting the resources of cgroup %s: %w", fsPath, err)
	}
	klog.FromContext(ctx).V(4).Info("Ensured cgroup", "cgroup", fsPath, "mode", m.opts.Mode, "driver", m.opts.Driver)
	return nil
}

// libManager is opencontainers/cgroups' manager of the cgroup at fsPath below the
// manager's root, given its directories explicitly: the library's own discovery
// reads /proc/self/mountinfo and /sys/fs/cgroup, which would miss a test tree.
func (m *Manager) libManager(fsPath string, res *occgroups.Resources) (occgroups.Manager, error) {
	cg := &occgroups.Cgroup{Path: fsPath, Resources: res}
	if m.opts.Mode == ModeV2 {
		mgr, err := fs2.NewManager(cg, filepath.Join(m.opts.Root, fsPath))
		if err != nil {
			return nil, fmt.Errorf("cgroup v2 manager for %s: %w", fsPath, err)
		}
		return mgr, nil
	}
	paths := map[string]string{}
	for _, h := range v1Hierarchies {
		if base := filepath.Join(m.opts.Root, h); isDir(base) {
			paths[h] = filepath.Join(base, fsPath)
		}
	}
	mgr, err := cgroupsv1.NewManager(cg, paths)
	if err != nil {
		return nil, fmt.Errorf("cgroup v1 manager for %s: %w", fsPath, err)
	}
	return mgr, nil
}

// libResources is rc as the library's resources for a v1 (or hybrid) or a v2
// layout. The library leaves a zero value alone, so "unlimited" (rc's 0 or less)
// is its -1; quota and period go together or not at all. Devices and the freezer
// are never touched, as the kubelet does for its QoS and pod cgroups.
func libResources(rc ResourceConfig, v2 bool) *occgroups.Resources {
	res := &occgroups.Resources{SkipDevices: true, SkipFreezeOnSet: true}
	if rc.CPUShares != nil {
		if v2 {
			// The same conversion runc applies to containers' shares, so pod and
			// container cgroups weigh alike.
			res.CpuWeight = occgroups.ConvertCPUSharesToCgroupV2Value(*rc.CPUShares)
		} else {
			res.CpuShares = *rc.CPUShares
		}
	}
	if rc.CPUQuota != nil && rc.CPUPeriod != nil {
		res.CpuPeriod = *rc.CPUPeriod
		res.CpuQuota = unlimitedAsMinusOne(*rc.CPUQuota)
	}
	if rc.Memory != nil {
		res.Memory = unlimitedAsMinusOne(*rc.Memory)
	}
	if rc.PidsLimit != nil {
		v := unlimitedAsMinusOne(*rc.PidsLimit)
		res.PidsLimit = &v
	}
	return res
}

func unlimitedAsMinusOne(v int64) int64 {
	if v <= 0 {
		return -1
	}
	return v
}

// enableControllers turns on nodelet's controllers in the subtree_control of every
// ancestor of name, so the cgroup gets cpu.weight, memory.max and pids.max files.
func (m *Manager) enableControllers(name CgroupName) error {
	avail, err := occgroups.ReadFile(m.opts.Root, "cgroup.controllers")
	if err != nil {
		return fmt.Errorf("reading available cgroup controllers: %w", err)
	}
	have := strings.Fields(avail)
	var want []string
	for _, c := range v2Controllers {
		if slices.Contains(have, c) {
			want = append(want, "+"+c)
		}
	}
	if len(want) == 0 {
		return nil
	}
	for i := 0; i < len(name); i++ {
		dir := filepath.Join(m.opts.Root, m.FsPath(name[:i]))
		if i > 0 {
			if err := m.mkdirAll(dir); err != nil {
				return fmt.Errorf("creating cgroup %s: %w", dir, err)
			}
		}
		if err := writeFile(dir, "cgroup.subtree_control", strings.Join(want, " ")); err != nil {
			// One controller the kernel refuses (e.g. cpuset in a threaded subtree)
			// must not keep the others off.
			for _, c := range want {
				_ = writeFile(dir, "cgroup.subtree_control", c)
			}
		}
	}
	return nil
}

// update changes the resources of an existing cgroup: with systemd first the slice's
// unit properties (so systemd does not put back old values), then the files.
func (m *Manager) update(ctx context.Context, name CgroupName, rc ResourceConfig) error {
	if m.opts.Driver == DriverSystemd {
		if err := m.setSliceProperties(ctx, name, rc); err != nil {
			return err
		}
	}
	return m.set(name, rc)
}

// set writes rc into the cgroup's files for the host's layout.
func (m *Manager) set(name CgroupName, rc ResourceConfig) error { return m.setPath(m.FsPath(name), rc) }

// setPath writes rc into the files of the existing cgroup at fsPath (see FsPath)
// through the library's manager.
func (m *Manager) setPath(fsPath string, rc ResourceConfig) error {
	res := libResources(rc, m.opts.Mode == ModeV2)
	lib, err := m.libManager(fsPath, res)
	if err != nil {
		return err
	}
	if err := lib.Set(res); err != nil {
		return fmt.Errorf("setting the resources of cgroup %s: %w", fsPath, err)
	}
	return nil
}

// writeFile writes one cgroup interface file the library has no setting for,
// through its opener (openat2 confined below /sys/fs/cgroup).
func writeFile(dir, file, value string) error {
	if err := occgroups.WriteFile(dir, file, value); err != nil {
		return fmt.Errorf("writing %q to %s: %w", value, filepath.Join(dir, file), err)
	}
	return nil
}

func readProcs(dir string) []int {
	data, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return nil
	}
	var out []int
	for _, f := range strings.Fields(string(data)) {
		if n, err := strconv.Atoi(f); err == nil {
			out = append(out, n)
		}
	}
	return out
}
