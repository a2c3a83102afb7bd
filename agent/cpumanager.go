package agent

import (
	"context"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/clock"
	"k8s.io/utils/cpuset"

	"github.com/nodelet/nodelet/cri"
	"github.com/nodelet/nodelet/internal/resourcemetrics"
	"github.com/nodelet/nodelet/resourcemanager/cpumanager"
)

// cpuManagerStartWait bounds how long the CPU manager's reconcile waits for
// the pod sources: before they synced, a restored pod looks inactive and
// would lose its CPUs.
const cpuManagerStartWait = time.Minute

// cpuRuntime is the CRI the CPU manager reads and updates containers with.
type cpuRuntime interface {
	cpumanager.Runtime
	cpumanager.ContainerLister
}

// newCPUManager builds the CPU manager from cpuManagerPolicy and its
// options, on the host's topology ("/").
func newCPUManager(kc *kubeletconfigv1beta1.KubeletConfiguration, rootDir string, rt cpuRuntime, active func() []*v1.Pod, clk clock.WithTicker, metrics *resourcemetrics.Metrics) (*cpumanager.Manager, error) {
	m, err := cpumanager.NewFromConfig(kc, rootDir, "/", rt, cpumanager.RunningFromCRI(rt, cri.LabelPodUID, cri.LabelContainerName), active, clk, metrics)
	if err != nil {
		return nil, fmt.Errorf("setting up the CPU manager (cpuManagerPolicy %q): %w", kc.CPUManagerPolicy, err)
	}
	return m, nil
}

// runCPUManager reconciles once the pod sources synced (or after
// cpuManagerStartWait).
func runCPUManager(ctx context.Context, m *cpumanager.Manager, synced <-chan struct{}, clk clock.Clock) {
	runAfterSynced(ctx, synced, clk.After(cpuManagerStartWait), m.Run)
}

// podResourcesCPUs is the CPU manager as the pod resources API asks it.
type podResourcesCPUs struct{ m *cpumanager.Manager }

func (c podResourcesCPUs) ExclusiveCPUs(uid types.UID, container string) []int64 {
	return cpuIDs(c.m.ExclusiveCPUs(string(uid), container))
}

func (c podResourcesCPUs) AllocatableCPUs() []int64 { return cpuIDs(c.m.AllocatableCPUs()) }

func cpuIDs(s cpuset.CPUSet) []int64 {
	ids := make([]int64, 0, s.Size())
	for _, id := range s.List() {
		ids = append(ids, int64(id))
	}
	return ids
}
