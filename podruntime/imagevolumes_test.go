package podruntime

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/volumes"
)

func TestImageVolumeSupport(t *testing.T) {
	for _, tc := range []struct {
		name, version string
		ok            bool
	}{
		{"containerd", "v2.4.2", true},
		{"containerd", "2.1.0", true},
		{"containerd", "v3.0.0", true},
		{"containerd", "v2.0.5", false},
		{"containerd", "1.6.20", false},
		{"containerd", "1.7.27~ds1", false},
		{"containerd", "devel", true}, // unknown: left to the runtime
		{"cri-o", "1.31.0", true},
	} {
		err := ImageVolumeSupport(tc.name, tc.version)
		if (err == nil) != tc.ok {
			t.Errorf("ImageVolumeSupport(%s, %s) = %v, want ok %v", tc.name, tc.version, err, tc.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "containerd 2.1 or later") {
			t.Errorf("refusal %q does not say what supports image volumes", err)
		}
	}
}

func TestImageMountMapping(t *testing.T) {
	hv := volumes.HostVolume{Image: &v1.ImageVolumeSource{Reference: "reg.example.com/data:1"}, ReadOnly: true, ImageRef: "sha256:d1"}
	for _, tc := range []struct {
		name string
		vm   v1.VolumeMount
		sub  string
	}{
		{"whole image", v1.VolumeMount{Name: "data", MountPath: "/data"}, ""},
		{"writable mount is still read-only", v1.VolumeMount{Name: "data", MountPath: "/data", ReadOnly: false}, ""},
		{"sub path", v1.VolumeMount{Name: "data", MountPath: "/etc/app", SubPath: "etc"}, "etc"},
	} {
		m, err := imageMount(&tc.vm, hv, tc.sub)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if m.ContainerPath != tc.vm.MountPath || m.HostPath != "" || !m.Readonly || m.ImageSubPath != tc.sub ||
			m.GetImage().GetImage() != "sha256:d1" || m.GetImage().GetUserSpecifiedImage() != "reg.example.com/data:1" ||
			m.Propagation != runtimeapi.MountPropagation_PROPAGATION_PRIVATE {
			t.Errorf("%s: mount %+v", tc.name, m)
		}
	}
	hv.ImageRef = ""
	if _, err := imageMount(&v1.VolumeMount{Name: "data", MountPath: "/data"}, hv, ""); err == nil {
		t.Error("an image volume that was not pulled was mounted")
	}
}

// imageVolumePod has an image volume "data" mounted by "app" (whole, and a
// sub path) and not by "other".
func imageVolumePod(name, ref string, policy v1.PullPolicy) *v1.Pod {
	pod := syncPod(name, v1.RestartPolicyAlways, nil, "app", "other")
	pod.Spec.Volumes = []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{Image: &v1.ImageVolumeSource{Reference: ref, PullPolicy: policy}}}}
	pod.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{
		{Name: "data", MountPath: "/data"},
		{Name: "data", MountPath: "/etc/app", SubPathExpr: "$(SUB)"},
	}
	pod.Spec.Containers[0].Env = []v1.EnvVar{{Name: "SUB", Value: "etc"}}
	return pod
}

func (r *syncRig) imageVolumeManager(rec record.EventRecorder, secrets fakeSecrets, support error) *Manager {
	cfg := Config{RootDir: r.root, PodLogsDir: filepath.Join(r.root, "logs"), ImageVolumeSupport: support}
	vols := volumes.NewManager(r.root, nil, clock.RealClock{}, volumes.WithoutTmpfs())
	return New(cfg, Deps{Runtime: r.client, Images: r.client, Volumes: vols, Env: secrets, Node: func() NodeFacts { return NodeFacts{Name: "node1"} }, Recorder: rec, Clock: clock.RealClock{}})
}

// An image volume is pulled like a container image (default policy Always for
// :latest, events) and each volumeMount of it becomes a read-only CRI image
// mount of the pulled reference, with its sub path inside the image.
func TestImageVolumePulledAndMounted(t *testing.T) {
	r := newSyncRig(t)
	ctx := context.Background()
	rec := record.NewFakeRecorder(100)
	m := r.imageVolumeManager(rec, fakeSecrets{}, nil)
	r.fake.AddImage("reg.example.com/data:latest")
	pod := imageVolumePod("imgvol", "reg.example.com/data:latest", "")
	if _, err := m.SyncPod(ctx, pod, r.status(pod)); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(r.fake.Calls(), "PullImage") {
		t.Error(":latest with no pull policy was not pulled although present (default Always)")
	}
	events := drain(rec)
	if !slices.Contains(events, `Normal Pulling Pulling image "reg.example.com/data:latest"`) {
		t.Errorf("events %q: no Pulling event for the image volume", events)
	}
	cfg := r.fake.ContainerConfig(r.containerID(pod, "app", runtimeapi.ContainerState_CONTAINER_RUNNING))
	var imgMounts []*runtimeapi.Mount
	for _, mnt := range cfg.GetMounts() {
		if mnt.GetImage() != nil {
			imgMounts = append(imgMounts, mnt)
		}
	}
	if len(imgMounts) != 2 {
		t.Fatalf("app mounts %v: want 2 image mounts", cfg.GetMounts())
	}
	for _, mnt := range imgMounts {
		if !mnt.Readonly || mnt.HostPath != "" || !strings.HasPrefix(mnt.GetImage().GetImage(), "sha256:") {
			t.Errorf("image mount %+v: want read-only, no host path, the pulled image's id", mnt)
		}
	}
	if imgMounts[0].ContainerPath != "/data" || imgMounts[0].ImageSubPath != "" ||
		imgMounts[1].ContainerPath != "/etc/app" || imgMounts[1].ImageSubPath != "etc" {
		t.Errorf("image mounts %v %v: want /data (whole image) and /etc/app (sub path etc)", imgMounts[0], imgMounts[1])
	}
	if dirs, _ := filepath.Glob(filepath.Join(r.root, "pods", string(pod.UID), "volumes", "*", "data")); len(dirs) > 0 {
		t.Errorf("an image volume left host directories %v", dirs)
	}
}

// A private image volume is pulled with the pod's imagePullSecrets; without
// them only the containers that mount it wait (ErrImagePull, then
// ImagePullBackOff), the others start. Never with the image absent is
// ErrImageNeverPull, and a runtime without image volumes is refused by name.
func TestImageVolumePullFailures(t *testing.T) {
	const private = "reg.example.com/team/data:1"
	secrets := fakeSecrets{secrets: map[string]*v1.Secret{
		"default/pull": dockerSecret("default", "pull", `{"auths":{"reg.example.com":{"username":"alice","password":"s3cret"}}}`),
	}}
	ctx := context.Background()

	t.Run("pull secret", func(t *testing.T) {
		r := newSyncRig(t)
		r.fake.RequireAuth("reg.example.com/team/data", "alice", "s3cret")
		m := r.imageVolumeManager(record.NewFakeRecorder(100), secrets, nil)
		pod := imageVolumePod("with-secret", private, v1.PullIfNotPresent)
		pod.Spec.ImagePullSecrets = []v1.LocalObjectReference{{Name: "pull"}}
		res, err := m.SyncPod(ctx, pod, r.status(pod))
		if err != nil || len(res.Waiting) > 0 {
			t.Fatalf("sync: waiting %v, err %v", res.Waiting, err)
		}
		r.containerID(pod, "app", runtimeapi.ContainerState_CONTAINER_RUNNING)
	})

	t.Run("no secret", func(t *testing.T) {
		r := newSyncRig(t)
		r.fake.RequireAuth("reg.example.com/team/data", "alice", "s3cret")
		rec := record.NewFakeRecorder(100)
		m := r.imageVolumeManager(rec, secrets, nil)
		pod := imageVolumePod("no-secret", private, v1.PullIfNotPresent)
		res, err := m.SyncPod(ctx, pod, r.status(pod))
		if err == nil {
			t.Error("a failed image volume pull is no sync error")
		}
		if w := res.Waiting["app"]; w.Reason != "ErrImagePull" || !strings.Contains(w.Message, "authorization failed") {
			t.Errorf("app waiting %+v, want ErrImagePull with the registry's refusal", w)
		}
		if _, ok := res.Waiting["other"]; ok {
			t.Errorf("other waits %+v though it does not mount the volume", res.Waiting["other"])
		}
		r.containerID(pod, "other", runtimeapi.ContainerState_CONTAINER_RUNNING)
		if got := r.containers(pod, "app"); len(got) != 0 {
			t.Errorf("app containers %v, want none", got)
		}
		if res.RequeueAfter <= 0 {
			t.Error("no requeue after the image volume's back-off")
		}
		events := drain(rec)
		if !slices.ContainsFunc(events, func(e string) bool {
			return strings.HasPrefix(e, `Warning Failed Failed to pull image "`+private+`": `)
		}) {
			t.Errorf("events %q: no Failed pull event", events)
		}
		res, err = m.SyncPod(ctx, pod, r.status(pod))
		if w := res.Waiting["app"]; err != nil || w.Reason != "ImagePullBackOff" || w.Message != `Back-off pulling image "`+private+`"` {
			t.Errorf("second sync: app waiting %+v, err %v; want ImagePullBackOff and no error", w, err)
		}
	})

	t.Run("never", func(t *testing.T) {
		r := newSyncRig(t)
		r.fake.AddImage("busybox:1") // the containers' own image: only the volume's may be missing
		m := r.imageVolumeManager(record.NewFakeRecorder(100), secrets, nil)
		pod := imageVolumePod("never", "reg.example.com/absent:1", v1.PullNever)
		res, _ := m.SyncPod(ctx, pod, r.status(pod))
		if w := res.Waiting["app"]; w.Reason != "ErrImageNeverPull" || w.Message != `Container image "reg.example.com/absent:1" is not present with pull policy of Never` {
			t.Errorf("app waiting %+v, want ErrImageNeverPull", w)
		}
		if slices.Contains(r.fake.Calls(), "PullImage") {
			t.Error("pulled under Never")
		}
	})

	t.Run("unsupported runtime", func(t *testing.T) {
		r := newSyncRig(t)
		r.fake.AddImage("reg.example.com/data:1")
		m := r.imageVolumeManager(record.NewFakeRecorder(100), secrets, ImageVolumeSupport("containerd", "1.6.20"))
		pod := imageVolumePod("old-runtime", "reg.example.com/data:1", v1.PullIfNotPresent)
		res, err := m.SyncPod(ctx, pod, r.status(pod))
		if w := res.Waiting["app"]; err == nil || w.Reason != "CreateContainerConfigError" ||
			!strings.Contains(w.Message, `mounting image volume "data": the container runtime (containerd 1.6.20) does not support image volumes`) {
			t.Errorf("app waiting %+v, err %v; want CreateContainerConfigError naming the runtime", w, err)
		}
		r.containerID(pod, "other", runtimeapi.ContainerState_CONTAINER_RUNNING)
	})
}
