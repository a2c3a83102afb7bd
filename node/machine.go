package node

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/nodelet/nodelet/procfs"
)

// MachineInfo holds the facts about the host that go into the Node's capacity and nodeInfo.
type MachineInfo struct {
	NumCores         int    // online logical CPUs of the machine (not of our own cpuset)
	MemoryCapacity   uint64 // MemTotal, bytes
	SwapCapacity     uint64 // SwapTotal, bytes
	EphemeralStorage uint64 // total bytes of the filesystem holding the root dir
	HugePages        []HugePage

	MachineID     string
	SystemUUID    string
	BootID        string
	KernelVersion string
	OSImage       string
}

// HugePage is one huge page size the kernel supports, with its preallocated page count.
type HugePage struct {
	SizeKiB  uint64
	NumPages uint64
}

// ReadMachineInfo reads the machine facts from the running host. rootDir is the kubelet root
// dir; its filesystem (or that of its nearest existing parent) sizes ephemeral-storage.
func ReadMachineInfo(rootDir string) (MachineInfo, error) {
	return readMachineInfo("/", rootDir)
}

// readMachineInfo reads host files under hostRoot so tests can point it at a fake tree.
func readMachineInfo(hostRoot, rootDir string) (MachineInfo, error) {
	p := func(path string) string { return filepath.Join(hostRoot, path) }
	var mi MachineInfo

	meminfo, err := procfs.ReadMeminfo(p("/proc/meminfo"))
	if err != nil {
		return MachineInfo{}, fmt.Errorf("reading memory capacity: %w", err)
	}
	mi.MemoryCapacity, mi.SwapCapacity = meminfo["MemTotal"], meminfo["SwapTotal"]

	// Upstream (cadvisor) counts the machine's online CPUs, independent of the agent's own
	// affinity; runtime.NumCPU is only a fallback because it follows our cpuset.
	mi.NumCores = runtime.NumCPU()
	if b, err := os.ReadFile(p("/sys/devices/system/cpu/online")); err == nil {
		if cpus, err := parseCPUList(strings.TrimSpace(string(b))); err == nil && len(cpus) > 0 {
			mi.NumCores = len(cpus)
		}
	}

	size, err := filesystemSize(rootDir)
	if err != nil {
		return MachineInfo{}, fmt.Errorf("reading ephemeral-storage capacity of %s: %w", rootDir, err)
	}
	mi.EphemeralStorage = size

	mi.HugePages = readHugePages(p("/sys/kernel/mm/hugepages"))
	mi.MachineID = firstFile(p("/etc/machine-id"), p("/var/lib/dbus/machine-id"))
	mi.SystemUUID = firstFile(p("/sys/class/dmi/id/product_uuid"), p("/proc/device-tree/system-id"), p("/proc/device-tree/vm,uuid"))
	mi.BootID = firstFile(p("/proc/sys/kernel/random/boot_id"))
	mi.KernelVersion = firstFile(p("/proc/sys/kernel/osrelease"))
	if mi.KernelVersion == "" {
		var u unix.Utsname
		if err := unix.Uname(&u); err == nil {
			mi.KernelVersion = unix.ByteSliceToString(u.Release[:])
		}
	}
	mi.OSImage = readOSImage(p("/etc/os-release"), p("/usr/lib/os-release"))
	return mi, nil
}

// filesystemSize is the total size of the filesystem holding dir; a root dir that does not
// exist yet (first start) is measured at its nearest existing parent.
func filesystemSize(dir string) (uint64, error) {
	dir = filepath.Clean(dir)
	for {
		var st unix.Statfs_t
		err := unix.Statfs(dir, &st)
		if err == nil {
			return st.Blocks * uint64(st.Bsize), nil
		}
		parent := filepath.Dir(dir)
		if !errors.Is(err, unix.ENOENT) || parent == dir {
			return 0, err
		}
		dir = parent
	}
}

// readHugePages lists /sys/kernel/mm/hugepages/hugepages-<size>kB entries.
func readHugePages(dir string) []HugePage {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []HugePage
	for _, e := range entries {
		name := e.Name()
		if !strings.HasPrefix(name, "hugepages-") || !strings.HasSuffix(name, "kB") {
			continue
		}
		size, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimPrefix(name, "hugepages-"), "kB"), 10, 64)
		if err != nil {
			continue
		}
		var n uint64
		if b, err := os.ReadFile(filepath.Join(dir, name, "nr_hugepages")); err == nil {
			n, _ = strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
		}
		out = append(out, HugePage{SizeKiB: size, NumPages: n})
	}
	return out
}

// firstFile returns the trimmed content of the first readable, non-empty file.
func firstFile(paths ...string) string {
	for _, path := range paths {
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		// device-tree strings end in NUL.
		if v := strings.TrimSpace(string(bytes.TrimRight(b, "\x00"))); v != "" {
			return v
		}
	}
	return ""
}

func readOSImage(paths ...string) string {
	for _, path := range paths {
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "PRETTY_NAME="); ok {
				if uq, err := strconv.Unquote(v); err == nil {
					v = uq
				} else {
					v = strings.Trim(v, `"'`)
				}
				return v
			}
		}
	}
	return "Linux"
}

// parseCPUList parses the kernel's cpu list format ("0-3,5,7-8").
func parseCPUList(s string) ([]int, error) {
	var out []int
	if s == "" {
		return nil, nil
	}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return nil, fmt.Errorf("parsing cpu list %q: %w", s, err)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil {
				return nil, fmt.Errorf("parsing cpu list %q: %w", s, err)
			}
		}
		if b < a || a < 0 {
			return nil, fmt.Errorf("parsing cpu list %q: bad range %q", s, part)
		}
		for i := a; i <= b; i++ {
			out = append(out, i)
		}
	}
	return out, nil
}
