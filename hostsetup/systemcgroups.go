package hostsetup

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/cgroups"
)

// systemCgroupsInterval is how often the processes are put back where the
// configuration wants them, as upstream's container manager does.
const systemCgroupsInterval = time.Minute

// CgroupPlacement is kubeletCgroups and systemCgroups, as upstream: nodelet's own
// process is kept in kubeletCgroups; every non-kernel process left in the root
// cgroup (but init) is moved to systemCgroups. The names are cgroupfs paths
// whatever the cgroup driver, as upstream.
type CgroupPlacement struct {
	cgroupfs string // /sys/fs/cgroup
	mode     cgroups.Mode
	procfs   string // /proc
	self     int
	kubelet  string // "" leaves nodelet where it is
	system   string // "" leaves the root cgroup alone
	clk      clock.Clock
}

// NewCgroupPlacement checks the two fields as upstream does; nil when neither is set.
func NewCgroupPlacement(kubeletCgroups, systemCgroups, cgroupRoot string, mode cgroups.Mode, cgroupfs, procfs string, self int, clk clock.Clock) (*CgroupPlacement, error) {
	s := &CgroupPlacement{cgroupfs: cgroupfs, mode: mode, procfs: procfs, self: self, clk: clk}
	var err error
	if kubeletCgroups != "" {
		if s.kubelet, err = cgroups.CleanCgroupPath("kubeletCgroups", kubeletCgroups); err != nil {
			return nil, err
		}
	}
	if systemCgroups != "" {
		if s.system, err = cgroups.CleanCgroupPath("systemCgroups", systemCgroups); err != nil {
			return nil, err
		}
		if s.system == "/" {
			return nil, errors.New(`systemCgroups: system container cannot be root ("/")`)
		}
		if cgroupRoot == "" {
			return nil, errors.New("invalid configuration: systemCgroups (--system-cgroups) was specified and cgroupRoot (--cgroup-root) was not specified")
		}
	}
	if s.kubelet == "" && s.system == "" {
		return nil, nil
	}
	return s, nil
}

// nonKernelProcesses are the pids to move out of the root cgroup: not init, not a
// kernel thread, not already tried in this pass.
func nonKernelProcesses(pids []int, isKernel func(int) bool, tried map[int]bool) []int {
	var out []int
	for _, pid := range pids {
		if pid == 1 || tried[pid] || isKernel(pid) {
			continue
		}
		out = append(out, pid)
	}
	return out
}

// isKernelThread: a kernel thread has no executable.
func (s *CgroupPlacement) isKernelThread(pid int) bool {
	_, err := os.Readlink(filepath.Join(s.procfs, strconv.Itoa(pid), "exe"))
	return errors.Is(err, fs.ErrNotExist)
}

// inHostPIDNamespace: nodelet in a container leaves its process where the
// container put it, as upstream.
func (s *CgroupPlacement) inHostPIDNamespace(pid int) (bool, error) {
	initNS, err := os.Readlink(filepath.Join(s.procfs, "1", "ns", "pid"))
	if err != nil {
		return false, fmt.Errorf("reading the pid namespace of init: %w", err)
	}
	ns, err := os.Readlink(filepath.Join(s.procfs, strconv.Itoa(pid), "ns", "pid"))
	if err != nil {
		return false, fmt.Errorf("reading the pid namespace of process %d: %w", pid, err)
	}
	return ns == initNS, nil
}

// ensure does one pass: the root cgroup's processes to systemCgroups first, then
// nodelet to kubeletCgroups (so it ends there even when it started in the root).
func (s *CgroupPlacement) ensure(ctx context.Context) error {
	var errs []error
	if s.system != "" {
		errs = append(errs, s.ensureSystem(ctx))
	}
	if s.kubelet != "" {
		errs = append(errs, s.ensureKubelet(ctx))
	}
	return errors.Join(errs...)
}

func (s *CgroupPlacement) ensureSystem(ctx context.Context) error {
	tried := map[int]bool{}
	var last error
	// Processes fork while others are moved: look again, up to 10 times, as upstream.
	for range 10 {
		all, err := cgroups.Procs(s.cgroupfs, s.mode, "/")
		if err != nil {
			last = err
			continue
		}
		pids := nonKernelProcesses(all, s.isKernelThread, tried)
		if len(pids) == 0 {
			return last
		}
		klog.FromContext(ctx).V(3).Info("Moving non-kernel processes", "pids", pids, "systemCgroups", s.system)
		for _, pid := range pids {
			tried[pid] = true
			if err := cgroups.MoveProcess(s.cgroupfs, s.mode, s.system, pid); err != nil {
				last = fmt.Errorf("failed to move PID %d into the system container %q: %w", pid, s.system, err)
			}
		}
	}
	return last
}

func (s *CgroupPlacement) ensureKubelet(ctx context.Context) error {
	inHost, err := s.inHostPIDNamespace(s.self)
	if err != nil {
		return err
	}
	if !inHost {
		klog.FromContext(ctx).V(2).Info("nodelet is not in the host's pid namespace; leaving it in its cgroup", "pid", s.self)
		return nil
	}
	procs, err := cgroups.Procs(s.cgroupfs, s.mode, s.kubelet)
	if err == nil && slices.Contains(procs, s.self) {
		return nil
	}
	if err := cgroups.MoveProcess(s.cgroupfs, s.mode, s.kubelet, s.self); err != nil {
		return fmt.Errorf("failed to move nodelet (PID %d) to kubeletCgroups %q: %w", s.self, s.kubelet, err)
	}
	return nil
}

// Run ensures the placement now and every minute; a failure is logged, as upstream.
func (s *CgroupPlacement) Run(ctx context.Context) {
	for {
		if err := s.ensure(ctx); err != nil {
			klog.FromContext(ctx).Info("Failed to ensure state", "kubeletCgroups", s.kubelet, "systemCgroups", s.system, "err", err)
		}
		t := s.clk.NewTimer(systemCgroupsInterval)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
	}
}
