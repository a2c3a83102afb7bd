package podruntime

import (
	"context"
	"errors"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/volumes"
)

func TestBlockDevices(t *testing.T) {
	vols := map[string]volumes.HostVolume{
		"rw":  {Path: "/var/lib/kubelet/pods/u/volumeDevices/kubernetes.io~csi/pv-rw", Device: true},
		"ro":  {Path: "/var/lib/kubelet/pods/u/volumeDevices/kubernetes.io~local-volume/pv-ro", Device: true, ReadOnly: true},
		"dir": {Path: "/var/lib/kubelet/pods/u/volumes/kubernetes.io~empty-dir/dir"},
	}
	for _, tc := range []struct {
		name string
		vds  []v1.VolumeDevice
		want []*runtimeapi.Device
		err  string
	}{
		{name: "none"},
		{name: "writable and read-only",
			vds: []v1.VolumeDevice{{Name: "rw", DevicePath: "/dev/xvda"}, {Name: "ro", DevicePath: "/dev/xvdb"}},
			want: []*runtimeapi.Device{
				{ContainerPath: "/dev/xvda", HostPath: vols["rw"].Path, Permissions: "mrw"},
				{ContainerPath: "/dev/xvdb", HostPath: vols["ro"].Path, Permissions: "r"},
			}},
		{name: "relative device path", vds: []v1.VolumeDevice{{Name: "rw", DevicePath: "dev/xvda"}},
			err: "error DevicePath `dev/xvda` must be an absolute path"},
		{name: "not a block volume", vds: []v1.VolumeDevice{{Name: "dir", DevicePath: "/dev/xvda"}},
			err: `cannot find volume "dir" to pass into container "app"`},
		{name: "missing volume", vds: []v1.VolumeDevice{{Name: "gone", DevicePath: "/dev/xvda"}},
			err: `cannot find volume "gone" to pass into container "app"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := blockDevices(&v1.Container{Name: "app", VolumeDevices: tc.vds}, vols)
			if tc.err != "" {
				if err == nil || err.Error() != tc.err {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("devices %v, want %v", got, tc.want)
			}
			for i := range got {
				if got[i].String() != tc.want[i].String() {
					t.Errorf("device %d = %v, want %v", i, got[i], tc.want[i])
				}
			}
		})
	}
}

// deviceVolumes gives every pod a block volume "disk".
type deviceVolumes struct {
	noVolumes
	hv volumes.HostVolume
}

func (d deviceVolumes) SetUpPod(context.Context, *v1.Pod) (map[string]volumes.HostVolume, error) {
	return map[string]volumes.HostVolume{"disk": d.hv}, nil
}

// A container's volumeDevices reach the runtime in ContainerConfig.Devices,
// not as mounts; a volumeDevice the volume manager did not map as a device
// keeps the container from being created (CreateContainerConfigError).
func TestVolumeDevicesInContainerConfig(t *testing.T) {
	ctx := context.Background()
	pod := syncPod("block", v1.RestartPolicyAlways, nil, "app")
	pod.Spec.Volumes = []v1.Volume{{Name: "disk", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "c"}}}}
	pod.Spec.Containers[0].VolumeDevices = []v1.VolumeDevice{{Name: "disk", DevicePath: "/dev/xvda"}}

	r := newSyncRig(t)
	link := "/var/lib/kubelet/pods/" + string(pod.UID) + "/volumeDevices/kubernetes.io~csi/pv1"
	m := r.managerWith(deviceVolumes{hv: volumes.HostVolume{Path: link, Device: true}}, record.NewFakeRecorder(100))
	if _, err := m.SyncPod(ctx, pod, r.status(pod)); err != nil {
		t.Fatal(err)
	}
	cfg := r.fake.ContainerConfig(r.containerID(pod, "app", runtimeapi.ContainerState_CONTAINER_RUNNING))
	if d := cfg.GetDevices(); len(d) != 1 || d[0].HostPath != link || d[0].ContainerPath != "/dev/xvda" || d[0].Permissions != "mrw" {
		t.Errorf("devices %v; want %s at /dev/xvda mrw", d, link)
	}
	for _, mnt := range cfg.GetMounts() {
		if mnt.HostPath == link || mnt.ContainerPath == "/dev/xvda" {
			t.Errorf("block volume mounted as well: %v", mnt)
		}
	}

	r2 := newSyncRig(t)
	m2 := r2.managerWith(deviceVolumes{hv: volumes.HostVolume{Path: "/some/dir"}}, record.NewFakeRecorder(100))
	res, _ := m2.SyncPod(ctx, pod, r2.status(pod))
	if w := res.Waiting["app"]; w.Reason != "CreateContainerConfigError" || !strings.Contains(w.Message, `cannot find volume "disk"`) {
		t.Errorf("waiting %+v; want CreateContainerConfigError naming the volume", res.Waiting["app"])
	}
}

// fakeDevices adds one env, one device node and one CDI device to "app", or fails.
type fakeDevices struct{ err error }

func (f fakeDevices) ApplyDevices(_ context.Context, _ *v1.Pod, c *v1.Container, cfg *runtimeapi.ContainerConfig) error {
	if f.err != nil {
		return f.err
	}
	if c.Name == "app" {
		cfg.Envs = append([]*runtimeapi.KeyValue{{Key: "GPU", Value: []byte("g0")}}, cfg.Envs...)
		cfg.Devices = append(cfg.Devices, &runtimeapi.Device{ContainerPath: "/dev/gpu0", HostPath: "/dev/null", Permissions: "rw"})
		cfg.CDIDevices = append(cfg.CDIDevices, &runtimeapi.CDIDevice{Name: "example.com/gpu=g0"})
	}
	return nil
}

// The device plugins' allocation reaches the runtime in the container's
// config; a failure to get it (PreStartContainer refused) is a
// CreateContainerConfigError.
func TestDevicePluginAllocationInContainerConfig(t *testing.T) {
	ctx := context.Background()
	pod := syncPod("gpu", v1.RestartPolicyAlways, nil, "app")
	r := newSyncRig(t)
	m, _ := r.managerWithDeps(Deps{Devices: fakeDevices{}})
	if _, err := m.SyncPod(ctx, pod, r.status(pod)); err != nil {
		t.Fatal(err)
	}
	cfg := r.fake.ContainerConfig(r.containerID(pod, "app", runtimeapi.ContainerState_CONTAINER_RUNNING))
	if d := cfg.GetDevices(); len(d) != 1 || d[0].ContainerPath != "/dev/gpu0" {
		t.Errorf("devices %v", d)
	}
	if c := cfg.GetCDIDevices(); len(c) != 1 || c[0].Name != "example.com/gpu=g0" {
		t.Errorf("CDI devices %v", c)
	}
	if e := cfg.GetEnvs(); len(e) == 0 || e[0].Key != "GPU" {
		t.Errorf("envs %v", e)
	}

	r2 := newSyncRig(t)
	m2, _ := r2.managerWithDeps(Deps{Devices: fakeDevices{err: errors.New("device plugin PreStartContainer rpc failed with err: boom")}})
	res, _ := m2.SyncPod(ctx, pod, r2.status(pod))
	if w := res.Waiting["app"]; w.Reason != "CreateContainerConfigError" || !strings.Contains(w.Message, "PreStartContainer") {
		t.Errorf("waiting %+v; want CreateContainerConfigError", res.Waiting["app"])
	}
}

// fakeDynamicResources fails preparation until err is cleared, counting calls.
type fakeDynamicResources struct {
	err   error
	calls int
}

func (f *fakeDynamicResources) PrepareResources(context.Context, *v1.Pod) error {
	f.calls++
	return f.err
}

// A pod's ResourceClaims are prepared before its sandbox; a preparation that
// fails leaves the pod without a sandbox, with upstream's event, and the
// next sync prepares again and runs it. A sync that creates no sandbox does
// not prepare.
func TestDynamicResourcesPreparedBeforeSandbox(t *testing.T) {
	ctx := context.Background()
	pod := syncPod("claims", v1.RestartPolicyAlways, nil, "app")
	r := newSyncRig(t)
	dr := &fakeDynamicResources{err: errors.New("prepare dynamic resources: DRA driver gpu.example.com is not registered")}
	m, rec := r.managerWithDeps(Deps{DynamicResources: dr})
	if _, err := m.SyncPod(ctx, pod, r.status(pod)); err == nil {
		t.Fatal("SyncPod succeeded with the claims unprepared")
	}
	if ev := <-rec.Events; ev != "Warning FailedPrepareDynamicResources Failed to prepare dynamic resources: prepare dynamic resources: DRA driver gpu.example.com is not registered" {
		t.Errorf("event %q", ev)
	}
	if n := len(r.status(pod).Sandboxes); n != 0 {
		t.Fatalf("%d sandboxes created for a pod whose claims are not prepared", n)
	}
	dr.err = nil
	if _, err := m.SyncPod(ctx, pod, r.status(pod)); err != nil {
		t.Fatal(err)
	}
	if got := r.containers(pod, "app"); len(got) != 1 || got[0] != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Fatalf("app containers %v after the claims were prepared", got)
	}
	if _, err := m.SyncPod(ctx, pod, r.status(pod)); err != nil {
		t.Fatal(err)
	}
	if dr.calls != 2 {
		t.Errorf("PrepareResources called %d times, want 2 (once per sandbox creation attempt)", dr.calls)
	}
}
