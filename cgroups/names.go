package cgroups

import (
	"fmt"
	"path"
	"strings"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Driver is the cgroup driver: who creates cgroups and how they are named.
type Driver string

const (
	DriverCgroupfs Driver = "cgroupfs"
	DriverSystemd  Driver = "systemd"
)

const (
	kubepodsName   = "kubepods"
	burstableName  = "burstable"
	besteffortName = "besteffort"
	podPrefix      = "pod"
)

// CgroupName is a driver-neutral cgroup name: its components from the top,
// e.g. {"kubepods", "burstable", "pod<uid>"}. An empty name is the root.
type CgroupName []string

// ParseCgroupRoot turns the cgroupRoot setting into a CgroupName: "" and "/" are
// the root; for cgroupfs "/a/b" is {"a","b"}; for systemd a slice name such as
// "a-b.slice" (or its path "a.slice/a-b.slice") is {"a","b"}.
func ParseCgroupRoot(cgroupRoot string, driver Driver) CgroupName {
	cgroupRoot = strings.Trim(cgroupRoot, "/")
	if cgroupRoot == "" {
		return nil
	}
	if driver == DriverSystemd {
		last := path.Base(cgroupRoot)
		last = strings.TrimSuffix(last, ".slice")
		if last == "" || last == "-" {
			return nil
		}
		var out CgroupName
		for _, p := range strings.Split(last, "-") {
			// Underscores stand for dashes in systemd unit names.
			out = append(out, strings.ReplaceAll(p, "_", "-"))
		}
		return out
	}
	return CgroupName(strings.Split(cgroupRoot, "/"))
}

// Child returns n extended by more components.
func (n CgroupName) Child(parts ...string) CgroupName {
	out := make(CgroupName, 0, len(n)+len(parts))
	return append(append(out, n...), parts...)
}

// Cgroupfs is the name as a cgroupfs path: "/kubepods/burstable/pod<uid>".
func (n CgroupName) Cgroupfs() string { return "/" + strings.Join(n, "/") }

// Systemd is the name as a path of nested slices, as systemd names them:
// "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_>.slice".
// Dashes in a component become underscores, because systemd uses dashes for nesting.
func (n CgroupName) Systemd() string {
	if len(n) == 0 {
		return "/"
	}
	var slices []string
	prefix := ""
	for _, c := range n {
		c = strings.ReplaceAll(c, "-", "_")
		if prefix == "" {
			prefix = c
		} else {
			prefix = prefix + "-" + c
		}
		slices = append(slices, prefix+".slice")
	}
	return strings.Join(slices, "/")
}

// ForDriver renders the name for a driver (cgroupfs for anything but systemd).
func (n CgroupName) ForDriver(d Driver) string {
	if d == DriverSystemd {
		return n.Systemd()
	}
	return n.Cgroupfs()
}

// KubepodsCgroupName is the node-allocatable cgroup under the cgroup root.
func KubepodsCgroupName(root CgroupName) CgroupName { return root.Child(kubepodsName) }

// QOSCgroupName is the cgroup of a QoS class under the cgroup root. Guaranteed pods
// have no QoS cgroup of their own: they sit directly under kubepods.
func QOSCgroupName(root CgroupName, qos v1.PodQOSClass) CgroupName {
	switch qos {
	case v1.PodQOSBurstable:
		return root.Child(kubepodsName, burstableName)
	case v1.PodQOSBestEffort:
		return root.Child(kubepodsName, besteffortName)
	}
	return root.Child(kubepodsName)
}

// PodCgroupName is the pod's own cgroup: <qos cgroup>/pod<uid>.
func PodCgroupName(root CgroupName, pod *v1.Pod) CgroupName {
	return QOSCgroupName(root, QOSClass(pod)).Child(podPrefix + string(pod.UID))
}

// CgroupParentForSandbox is the value for PodSandboxConfig.Linux.CgroupParent: the
// cgroupfs path, or with systemd the pod slice's path of nested slices
// ("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_>.slice"), as
// the upstream kubelet passes it. containerd (SystemdCgroup = true) and CRI-O keep
// only its last element, the pod's slice unit, and run each container in a scope
// below it (containerd: runc cgroupsPath "<pod slice>:cri-containerd:<id>").
func CgroupParentForSandbox(root CgroupName, pod *v1.Pod, driver Driver) string {
	return FsPath(PodCgroupName(root, pod), driver)
}

// DriverFromCRI maps the runtime's RuntimeConfig answer to a driver name.
func DriverFromCRI(d runtimeapi.CgroupDriver) string {
	switch d {
	case runtimeapi.CgroupDriver_SYSTEMD:
		return string(DriverSystemd)
	case runtimeapi.CgroupDriver_CGROUPFS:
		return string(DriverCgroupfs)
	}
	return ""
}

// CheckDriver compares the configured cgroupDriver with the one the runtime reports
// (CRI RuntimeConfig linux.cgroup_driver). An empty runtimeReported means the
// runtime does not implement RuntimeConfig; the configured value then stands.
//
// Upstream (KubeletCgroupDriverFromCRI, GA) silently adopts the runtime's value;
// nodelet refuses to start instead, because a silent switch moves every pod cgroup.
func CheckDriver(configured, runtimeReported string) error {
	switch Driver(configured) {
	case DriverCgroupfs, DriverSystemd:
	default:
		return fmt.Errorf("cgroupDriver %q is not supported: use %q or %q", configured, DriverCgroupfs, DriverSystemd)
	}
	if runtimeReported == "" || runtimeReported == configured {
		return nil
	}
	systemdCgroup := runtimeReported == string(DriverSystemd)
	return fmt.Errorf("cgroup driver mismatch: nodelet is configured with cgroupDriver %q but the container runtime uses %q; "+
		"set cgroupDriver: %s in the nodelet config (or --cgroup-driver=%s), or configure the runtime for %q "+
		"(containerd: SystemdCgroup = %t in the runc runtime options)",
		configured, runtimeReported, runtimeReported, runtimeReported, configured, !systemdCgroup)
}
