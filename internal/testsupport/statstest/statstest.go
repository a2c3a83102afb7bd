// Package statstest builds fake nodes for the stats tests and benchmarks: a
// cgroup v2 filesystem and procfs in a temp dir and a CRI runtime answering
// from fixed lists.
package statstest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/cri"
)

// Runtime answers the CRI calls stats makes from fixed lists.
type Runtime struct {
	Sandboxes      []*runtimeapi.PodSandbox
	Containers     []*runtimeapi.Container
	ContainerStats []*runtimeapi.ContainerStats
	// SandboxStats answers ListPodSandboxStats; nil: Unimplemented.
	SandboxStats []*runtimeapi.PodSandboxStats
	ImageFs      *runtimeapi.ImageFsInfoResponse
	// SandboxInfo answers verbose PodSandboxStatus by sandbox ID; nil: Unimplemented.
	SandboxInfo map[string]map[string]string
	// StatusCalls counts PodSandboxStatus calls.
	StatusCalls int
}

func (r *Runtime) PodSandboxStatus(_ context.Context, id string, _ bool) (*runtimeapi.PodSandboxStatusResponse, error) {
	r.StatusCalls++
	if r.SandboxInfo == nil {
		return nil, status.Error(codes.Unimplemented, "not implemented")
	}
	info, ok := r.SandboxInfo[id]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "sandbox %s not found", id)
	}
	return &runtimeapi.PodSandboxStatusResponse{Info: info}, nil
}

func (r *Runtime) ListPodSandbox(context.Context, *runtimeapi.PodSandboxFilter) ([]*runtimeapi.PodSandbox, error) {
	return r.Sandboxes, nil
}

func (r *Runtime) ListContainers(context.Context, *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error) {
	return r.Containers, nil
}

func (r *Runtime) ListContainerStats(context.Context, *runtimeapi.ContainerStatsFilter) ([]*runtimeapi.ContainerStats, error) {
	return r.ContainerStats, nil
}

func (r *Runtime) ListPodSandboxStats(context.Context, *runtimeapi.PodSandboxStatsFilter) ([]*runtimeapi.PodSandboxStats, error) {
	if r.SandboxStats == nil {
		return nil, status.Error(codes.Unimplemented, "not implemented")
	}
	return r.SandboxStats, nil
}

func (r *Runtime) ImageFsInfo(context.Context) (*runtimeapi.ImageFsInfoResponse, error) {
	if r.ImageFs == nil {
		return nil, status.Error(codes.Unimplemented, "not implemented")
	}
	return r.ImageFs, nil
}

// WriteFile writes root/name, making its directories.
func WriteFile(tb testing.TB, root, name, content string) {
	tb.Helper()
	p := filepath.Join(root, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		tb.Fatal(err)
	}
}

// Cgroup is the interface files of one fake cgroup v2 directory, by name.
type Cgroup map[string]string

// WriteCgroup writes the files of the cgroup at cgroupPath under root.
func WriteCgroup(tb testing.TB, root, cgroupPath string, files Cgroup) {
	tb.Helper()
	for name, content := range files {
		WriteFile(tb, root, filepath.Join(cgroupPath, name), content)
	}
}

// ContainerCgroup is what every fake container's cgroup holds: 1.5 s of CPU,
// a 50ms/100ms quota with 4 of 10 periods throttled for 0.25 s, 10 MiB in use
// of which 2 MiB are inactive file pages, 1 OOM kill, IO on 8:0 and 2 processes.
var ContainerCgroup = Cgroup{
	"cpu.stat":            "usage_usec 1500000\nuser_usec 1000000\nsystem_usec 500000\nnr_periods 10\nnr_throttled 4\nthrottled_usec 250000\n",
	"cpu.max":             "50000 100000\n",
	"memory.current":      "10485760\n",
	"memory.stat":         "anon 6291456\nfile 3145728\nkernel 1048576\nactive_file 1048576\ninactive_file 2097152\n",
	"memory.swap.current": "4096\n",
	"memory.events":       "low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\noom_group_kill 0\n",
	"io.stat":             "8:0 rbytes=4096 wbytes=8192 rios=1 wios=2 dbytes=0 dios=0\n",
	"cgroup.procs":        "100\n101\n",
}

// PodCgroup is every fake pod cgroup's: no CPU limit (so no throttling
// counters), 3 s of CPU, 20 MiB in use, 4 MiB inactive.
var PodCgroup = Cgroup{
	"cpu.stat":       "usage_usec 3000000\nuser_usec 2000000\nsystem_usec 1000000\nnr_periods 0\nnr_throttled 0\nthrottled_usec 0\n",
	"cpu.max":        "max 100000\n",
	"memory.current": "20971520\n",
	"memory.stat":    "anon 12582912\nfile 6291456\ninactive_file 4194304\n",
	"memory.events":  "low 0\nhigh 0\nmax 0\noom 0\noom_kill 2\n",
	"io.stat":        "8:0 rbytes=8192 wbytes=16384 rios=2 wios=4\n",
	"cgroup.procs":   "",
}

// NetDev is every fake sandbox process's /proc/<pid>/net/dev: eth0 with
// 1000 bytes received and 2000 sent, and loopback (which cAdvisor leaves out).
const NetDev = `Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo:     500       5    0    0    0     0          0         0      500       5    0    0    0     0       0          0
  eth0:    1000      10    0    0    0     0          0         0     2000      20    0    0    0     0       0          0
`

// Node is a fake node running pods, each with one running container "app",
// in the systemd driver's cgroup layout.
type Node struct {
	CgroupRoot, ProcRoot, SysRoot string
	Runtime                       *Runtime
	Pods                          []*v1.Pod
}

// PodCgroupPath is the fake pod's cgroup, as the systemd driver names a
// burstable pod's.
func PodCgroupPath(pod *v1.Pod) string {
	u := strings.ReplaceAll(string(pod.UID), "-", "_")
	return "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + u + ".slice"
}

// PauseImage is the fake runtime's sandbox image.
const PauseImage = "registry.example/pause:3.10"

// ContainerID is the fake container ID of pod i.
func ContainerID(i int) string { return fmt.Sprintf("%064x", i+1) }

// SandboxID is the fake sandbox ID of pod i.
func SandboxID(i int) string { return fmt.Sprintf("%064x", i+1<<32) }

// NewNode writes a node of n pods under dir.
func NewNode(tb testing.TB, dir string, n int) *Node {
	tb.Helper()
	nd := &Node{CgroupRoot: filepath.Join(dir, "cgroup"), ProcRoot: filepath.Join(dir, "proc"), SysRoot: filepath.Join(dir, "sys"), Runtime: &Runtime{}}
	WriteFile(tb, nd.ProcRoot, "meminfo", "MemTotal: 8000000 kB\nMemFree: 4000000 kB\nSwapTotal: 0 kB\nSwapFree: 0 kB\n")
	WriteFile(tb, nd.ProcRoot, "stat", "cpu 100 0 100 1000 0 0 0 0 0 0\nbtime 1000\n")
	WriteFile(tb, nd.SysRoot, "dev/block/8:0/uevent", "MAJOR=8\nMINOR=0\nDEVNAME=sda\nDEVTYPE=disk\n")
	for i := range n {
		uid := types.UID(fmt.Sprintf("00000000-0000-0000-0000-%012d", i))
		pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("pod-%d", i), Namespace: "ns", UID: uid},
			Spec: v1.PodSpec{Containers: []v1.Container{{Name: "app", Image: "registry.example/app:1"}}}}
		nd.Pods = append(nd.Pods, pod)
		sb, ctr := SandboxID(i), ContainerID(i)
		nd.Runtime.Sandboxes = append(nd.Runtime.Sandboxes, &runtimeapi.PodSandbox{Id: sb, CreatedAt: 1700000000e9,
			Metadata: &runtimeapi.PodSandboxMetadata{Name: pod.Name, Namespace: pod.Namespace, Uid: string(uid)},
			State:    runtimeapi.PodSandboxState_SANDBOX_READY})
		nd.Runtime.Containers = append(nd.Runtime.Containers, &runtimeapi.Container{Id: ctr, PodSandboxId: sb, CreatedAt: 1700000001e9,
			Metadata: &runtimeapi.ContainerMetadata{Name: "app"}, Image: &runtimeapi.ImageSpec{Image: "sha256:0123"},
			State: runtimeapi.ContainerState_CONTAINER_RUNNING, Labels: map[string]string{cri.LabelPodUID: string(uid)}})
		nd.Runtime.ContainerStats = append(nd.Runtime.ContainerStats, &runtimeapi.ContainerStats{
			Attributes:    &runtimeapi.ContainerAttributes{Id: ctr},
			WritableLayer: &runtimeapi.FilesystemUsage{UsedBytes: &runtimeapi.UInt64Value{Value: 65536}}})
		podDir := PodCgroupPath(pod)
		WriteCgroup(tb, nd.CgroupRoot, podDir, PodCgroup)
		WriteCgroup(tb, nd.CgroupRoot, podDir+"/cri-containerd-"+ctr+".scope", ContainerCgroup)
		pid := 10000 + i
		WriteCgroup(tb, nd.CgroupRoot, podDir+"/cri-containerd-"+sb+".scope", Cgroup{"cgroup.procs": fmt.Sprintf("%d\n", pid), "memory.current": "4096\n"})
		WriteFile(tb, nd.ProcRoot, fmt.Sprintf("%d/net/dev", pid), NetDev)
	}
	return nd
}
