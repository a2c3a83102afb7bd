//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/test/e2e/framework"
)

// samplePod asks for one of the sample plugin's devices and prints, once, the device files
// the container has in /tmp and the mount points there: what the plugin's Allocate gave it.
func samplePod(l *lifecycle, name string) *v1.Pod {
	p := l.f.BusyboxPod(l.ns, name, "sh", "-c", `trap 'exit 0' TERM
for f in /tmp/Dev-*; do echo "file=${f#/tmp/}"; done
awk '$5 ~ "^/tmp/Dev-" {print "mount=" $5}' /proc/self/mountinfo
echo done
sleep 3600 & wait`)
	p.Spec.NodeName = l.f.Env.NodeName
	p.Spec.TerminationGracePeriodSeconds = ptr.To[int64](5)
	p.Spec.Containers[0].Resources.Limits = v1.ResourceList{framework.SampleDeviceResource: resource.MustParse("1")}
	return p
}

// containerSees waits for samplePod's report and checks it is exactly device id, as a file
// bind-mounted from the plugin's host file.
func containerSees(ctx context.Context, t *testing.T, l *lifecycle, pod, id string) {
	t.Helper()
	var out string
	err := framework.WaitFor(ctx, time.Minute, pod+"'s report", func(ctx context.Context) (bool, error) {
		raw, err := l.f.Client.CoreV1().Pods(l.ns).GetLogs(pod, &v1.PodLogOptions{}).DoRaw(ctx)
		out = string(raw)
		return err == nil && strings.Contains(out, "done\n"), nil
	})
	if err != nil {
		t.Fatalf("%v (log %q)", err, out)
	}
	if want := fmt.Sprintf("file=%s\nmount=/tmp/%s\ndone\n", id, id); out != want {
		t.Errorf("%s's container sees %q, want %q (the mount Allocate gave for %s and nothing else)", pod, out, want, id)
	}
}

// sampleDevicesOf is the pod's devices of the sample resource in the pod resources API.
func sampleDevicesOf(ctx context.Context, t *testing.T, pr podresourcesapi.PodResourcesListerClient, ns, pod string) []string {
	t.Helper()
	var ids []string
	for _, c := range podResourcesOf(ctx, t, pr, ns, pod).GetContainers() {
		for _, d := range c.Devices {
			if d.ResourceName == framework.SampleDeviceResource {
				ids = append(ids, d.DeviceIds...)
			}
		}
	}
	slices.Sort(ids)
	return ids
}

// allocatableSampleDevices are the sample resource's devices GetAllocatableResources lists:
// those of a plugin registered with this nodelet process (after a restart, none until the
// plugin registers again).
func allocatableSampleDevices(ctx context.Context, pr podresourcesapi.PodResourcesListerClient) ([]string, error) {
	res, err := pr.GetAllocatableResources(ctx, &podresourcesapi.AllocatableResourcesRequest{})
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, d := range res.Devices {
		if d.ResourceName == framework.SampleDeviceResource {
			ids = append(ids, d.DeviceIds...)
		}
	}
	slices.Sort(ids)
	return ids, nil
}

// TestSampleDevicePlugin (issue 21): upstream's sample device plugin, run as a host process,
// registers and its two devices become the node's example.com/resource; a pod asking for
// one runs with the mount of the device Allocate gave; the plugin restarted is allocatable
// again and the pod runs on; nodelet restarted keeps the pod's device (the pod resources API
// lists the same one), the plugin registers again by itself, and a second pod gets the other
// device.
func TestSampleDevicePlugin(t *testing.T) {
	f := framework.New(t)
	ctx := context.Background()
	l := &lifecycle{f: f, ns: f.NewNamespace(), dir: t.TempDir()}
	n := startNode(t, f, framework.NodeletOptions{})
	dp := f.StartSampleDevicePlugin(n)
	nodeDevices(ctx, t, f, framework.SampleDeviceResource, 2, 2)
	pr := podResourcesClient(t, n)

	first := samplePod(l, "first")
	l.create(ctx, t, first)
	before := l.wait(ctx, t, first.Name, 2*time.Minute, "Running", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })
	ids := sampleDevicesOf(ctx, t, pr, l.ns, first.Name)
	if len(ids) != 1 || !slices.Contains(framework.SampleDevices(), ids[0]) {
		t.Fatalf("first's devices in the pod resources API = %v, want one of %v", ids, framework.SampleDevices())
	}
	containerSees(ctx, t, l, first.Name, ids[0])
	if _, err := os.Stat(filepath.Join("/tmp", ids[0])); err != nil {
		t.Errorf("the plugin's host file for %s: %v", ids[0], err)
	}

	stillRunning := func(what string) {
		t.Helper()
		after := l.wait(ctx, t, first.Name, time.Minute, "running "+what, func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })
		if b, a := before.Status.ContainerStatuses[0], after.Status.ContainerStatuses[0]; b.ContainerID != a.ContainerID || a.RestartCount != 0 || a.State.Running == nil {
			t.Errorf("first's container changed %s: %s -> %s (restarts %d, %s)", what, b.ContainerID, a.ContainerID, a.RestartCount, framework.DescribePod(after))
		}
	}

	// The plugin restarts: its devices stay in capacity, allocatable only once it is back.
	dp.Stop()
	nodeDevices(ctx, t, f, framework.SampleDeviceResource, 2, 0)
	dp.Start()
	nodeDevices(ctx, t, f, framework.SampleDeviceResource, 2, 2)
	stillRunning("across the plugin's restart")

	// nodelet restarts: it removes the plugin's socket and makes kubelet.sock anew, which the
	// plugin watches for to register again (its first retry is 10s later). Only the new
	// process answers the pod resources API, and it lists devices of registered plugins only.
	restartForRegistration(ctx, t, n)
	pr = podResourcesClient(t, n)
	var alloc []string
	err := framework.WaitFor(ctx, 2*time.Minute, "the plugin registered with the restarted nodelet", func(ctx context.Context) (bool, error) {
		if err := dp.Check(); err != nil {
			return false, &framework.StopError{Err: err}
		}
		var err error
		alloc, err = allocatableSampleDevices(ctx, pr)
		return err == nil && slices.Equal(alloc, framework.SampleDevices()), nil
	})
	if err != nil {
		t.Fatalf("%v (allocatable devices %v)", err, alloc)
	}
	f.WaitForNodeReady(ctx, 2*time.Minute)
	nodeDevices(ctx, t, f, framework.SampleDeviceResource, 2, 2)
	stillRunning("across nodelet's restart")
	if got := sampleDevicesOf(ctx, t, pr, l.ns, first.Name); !slices.Equal(got, ids) {
		t.Errorf("first's devices after nodelet's restart = %v, want %v", got, ids)
	}

	// The device left is the other one.
	other := slices.DeleteFunc(framework.SampleDevices(), func(d string) bool { return d == ids[0] })
	second := samplePod(l, "second")
	l.create(ctx, t, second)
	l.wait(ctx, t, second.Name, 2*time.Minute, "Running", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })
	if got := sampleDevicesOf(ctx, t, pr, l.ns, second.Name); !slices.Equal(got, other) {
		t.Fatalf("second's devices = %v, want %v (first holds %v)", got, other, ids)
	}
	containerSees(ctx, t, l, second.Name, other[0])
}
