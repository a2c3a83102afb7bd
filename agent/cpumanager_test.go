package agent

import (
	"context"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/config"
	"github.com/nodelet/nodelet/resourcemanager/cpumanager"
	"github.com/nodelet/nodelet/resourcemanager/devicemanager"
	"github.com/nodelet/nodelet/resourcemanager/memorymanager"
	"github.com/nodelet/nodelet/resourcemanager/topologymanager"
	"github.com/nodelet/nodelet/syncloop"
)

type noCPURuntime struct{}

func (noCPURuntime) UpdateContainerResources(context.Context, string, *runtimeapi.ContainerResources) error {
	return nil
}

func (noCPURuntime) ListContainers(context.Context, *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error) {
	return nil, nil
}

// resourceAdmit is admission's resource allocation as the agent wires it:
// the topology manager under policy over the CPU manager, a memory manager
// under policy None and a device manager without plugins, on one NUMA node.
func resourceAdmit(t *testing.T, cpus *cpumanager.Manager, policy string) func(*v1.Pod) *syncloop.Rejection {
	t.Helper()
	devices, err := devicemanager.New(t.TempDir(), clock.RealClock{}, []int{0})
	if err != nil {
		t.Fatal(err)
	}
	memory, err := memorymanager.New(memorymanager.Config{Policy: memorymanager.PolicyNone, RootDir: t.TempDir()}, clock.RealClock{})
	if err != nil {
		t.Fatal(err)
	}
	topo, err := topologymanager.New(topologymanager.Config{Policy: policy, Scope: topologymanager.ScopeContainer,
		Options: topologymanager.Options{MaxAllowableNUMANodes: topologymanager.DefaultMaxAllowableNUMANodes}, NUMA: topologymanager.NUMAInfo{Nodes: []int{0}}}, cpus, memory, devices)
	if err != nil {
		t.Fatal(err)
	}
	alloc := resourceAllocator{topology: topo, memory: memory, devices: devices}
	return func(pod *v1.Pod) *syncloop.Rejection {
		if err := alloc.Allocate(context.Background(), pod, nil, true); err != nil {
			return syncloop.AllocationRejection(err)
		}
		return nil
	}
}

func guaranteedPod(uid string, cpus string) *v1.Pod {
	r := v1.ResourceList{v1.ResourceCPU: resource.MustParse(cpus), v1.ResourceMemory: resource.MustParse("64Mi")}
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: uid, Namespace: "default", UID: types.UID("uid-" + uid)},
		Spec:       v1.PodSpec{Containers: []v1.Container{{Name: "app", Resources: v1.ResourceRequirements{Requests: r, Limits: r}}}},
	}
}

// TestCPUManagerFromConfig: cpuManagerPolicy static with reservedSystemCPUs
// "0" on this host pins a Guaranteed 1-CPU pod off CPU 0 and refuses one that
// no longer fits with upstream's reason; a checkpoint of the other policy
// stops the start.
func TestCPUManagerFromConfig(t *testing.T) {
	topo, err := cpumanager.DiscoverTopology("/")
	if err != nil || topo.NumCPUs < 2 {
		t.Skipf("needs a host with 2 CPUs or more (topology %v, %v)", topo, err)
	}
	root := t.TempDir()
	kc := &kubeletconfigv1beta1.KubeletConfiguration{CPUManagerPolicy: "static", ReservedSystemCPUs: "0"}
	config.SetDefaults(kc)
	m, err := newCPUManager(kc, root, noCPURuntime{}, func() []*v1.Pod { return nil }, clock.RealClock{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	admit := resourceAdmit(t, m, topologymanager.PolicyNone)
	if rej := admit(guaranteedPod("g", "1")); rej != nil {
		t.Fatalf("refused: %+v", rej)
	}
	if got, want := m.CPUSetFor("uid-g", "app"), m.ExclusiveCPUs("uid-g", "app").String(); got != want {
		t.Errorf("container cpuset %q, want its exclusive CPUs %q", got, want)
	}
	if got := m.ExclusiveCPUs("uid-g", "app"); got.Size() != 1 || got.Contains(0) {
		t.Errorf("exclusive CPUs %q, want one CPU other than the reserved 0", got)
	}
	rej := admit(guaranteedPod("big", "1000"))
	if rej == nil || rej.Reason != "UnexpectedAdmissionError" || !strings.Contains(rej.Message, "not enough cpus available") {
		t.Errorf("rejection %+v", rej)
	}

	kc.CPUManagerPolicy = "none"
	if _, err := newCPUManager(kc, root, noCPURuntime{}, func() []*v1.Pod { return nil }, clock.RealClock{}, nil); err == nil ||
		!strings.Contains(err.Error(), `configured policy "none" differs from state checkpoint policy "static"`) {
		t.Errorf("policy switch: got %v", err)
	}
}
