// Package machineinfo reads the machine's NUMA nodes, cores, threads, caches
// and per-node memory through cadvisor's machine-info code
// (github.com/google/cadvisor/lib/utils/sysinfo), as upstream's kubelet
// does, without cadvisor's manager or container handlers.
//
// cadvisor's real sysfs reader has /sys hard-coded for the node list, the
// online CPU list and the caches; under a root other than "/" (a fixture
// tree in tests) those three are read under the root instead, and every
// other call goes to cadvisor with the rooted paths it was handed.
package machineinfo

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	info "github.com/google/cadvisor/lib/model"
	"github.com/google/cadvisor/lib/utils/sysfs"
	"github.com/google/cadvisor/lib/utils/sysinfo"
	"k8s.io/utils/cpuset"
)

// hostCPUDir is the CPU directory cadvisor hands back to GetCPUsPaths when
// the machine has no NUMA node directories.
const hostCPUDir = "/sys/devices/system/cpu"

// Nodes returns the NUMA nodes under root ("/" on a host): each node's
// online cores with their threads, caches, memory and huge pages. Without
// node directories cadvisor returns one node per socket, as upstream sees it.
func Nodes(root string) ([]info.Node, error) {
	nodes, _, err := sysinfo.GetNodesInfo(sysFsAt(root))
	if err != nil {
		return nil, fmt.Errorf("reading the machine topology under %s: %w", root, err)
	}
	return nodes, nil
}

func sysFsAt(root string) sysfs.SysFs {
	if root == "" || filepath.Clean(root) == "/" {
		return sysfs.NewRealSysFs()
	}
	return rootedSysFs{SysFs: sysfs.NewRealSysFs(), root: root}
}

// rootedSysFs is cadvisor's reader with its hard-coded /sys paths moved
// under root. The embedded reader is only handed paths under root.
type rootedSysFs struct {
	sysfs.SysFs
	root string
}

func (fs rootedSysFs) GetNodesPaths() ([]string, error) {
	return filepath.Glob(filepath.Join(fs.root, "sys/devices/system/node/node*[0-9]"))
}

func (fs rootedSysFs) GetCPUsPaths(dir string) ([]string, error) {
	if dir == hostCPUDir {
		dir = filepath.Join(fs.root, hostCPUDir)
	}
	return fs.SysFs.GetCPUsPaths(dir)
}

// IsCPUOnline is true without an online list (no CPU hotplug), as cadvisor.
func (fs rootedSysFs) IsCPUOnline(dir string) bool {
	b, err := os.ReadFile(filepath.Join(fs.root, hostCPUDir, "online"))
	if os.IsNotExist(err) {
		return true
	}
	if err != nil {
		return false
	}
	online, err := cpuset.Parse(strings.TrimSpace(string(b)))
	if err != nil {
		return false
	}
	id, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(dir), "cpu"))
	return err == nil && online.Contains(id)
}

// GetCaches: fixture trees carry no caches; cadvisor treats the error as a
// node without cache information.
func (fs rootedSysFs) GetCaches(id int) ([]os.FileInfo, error) {
	return nil, fmt.Errorf("caches of cpu%d under %s: %w", id, fs.root, os.ErrNotExist)
}
