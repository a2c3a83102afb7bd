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
	"k8s.io/utils/ptr"
)

func TestVerifyRunAsNonRoot(t *testing.T) {
	const where = `(pod: "p_ns(uid-1)", container: app)`
	tests := []struct {
		name     string
		pod      *v1.PodSecurityContext
		ctr      *v1.SecurityContext
		uid      *int64
		username string
		want     string // "" means allowed
	}{
		{name: "no policy, root image", uid: ptr.To[int64](0)},
		{name: "runAsNonRoot false", ctr: &v1.SecurityContext{RunAsNonRoot: ptr.To(false)}, uid: ptr.To[int64](0)},
		{name: "container false overrides pod true", pod: &v1.PodSecurityContext{RunAsNonRoot: ptr.To(true)}, ctr: &v1.SecurityContext{RunAsNonRoot: ptr.To(false)}, uid: ptr.To[int64](0)},
		{name: "image uid 0", ctr: &v1.SecurityContext{RunAsNonRoot: ptr.To(true)}, uid: ptr.To[int64](0),
			want: "container has runAsNonRoot and image will run as root " + where},
		{name: "pod-level policy applies to the container", pod: &v1.PodSecurityContext{RunAsNonRoot: ptr.To(true)}, uid: ptr.To[int64](0),
			want: "container has runAsNonRoot and image will run as root " + where},
		{name: "image non-root uid", ctr: &v1.SecurityContext{RunAsNonRoot: ptr.To(true)}, uid: ptr.To[int64](1234)},
		{name: "image names a user", ctr: &v1.SecurityContext{RunAsNonRoot: ptr.To(true)}, username: "nobody",
			want: "container has runAsNonRoot and image has non-numeric user (nobody), cannot verify user is non-root " + where},
		{name: "image uid out of range", ctr: &v1.SecurityContext{RunAsNonRoot: ptr.To(true)}, uid: ptr.To[int64](1 << 40),
			want: "container has runAsNonRoot and image has an invalid user id (1099511627776). (Must be 1-(2147483647))"},
		{name: "runAsUser 0", ctr: &v1.SecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](0)},
			want: "container's runAsUser breaks non-root policy " + where},
		{name: "pod runAsUser 0", pod: &v1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](0)},
			want: "container's runAsUser breaks non-root policy " + where},
		{name: "runAsUser non-root wins over a root image", ctr: &v1.SecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](1000)}, uid: ptr.To[int64](0)},
		{name: "container runAsUser over pod 0", pod: &v1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](0)},
			ctr: &v1.SecurityContext{RunAsUser: ptr.To[int64](1000)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := &v1.Pod{}
			pod.Name, pod.Namespace, pod.UID = "p", "ns", "uid-1"
			pod.Spec.SecurityContext = tt.pod
			c := &v1.Container{Name: "app", SecurityContext: tt.ctr}
			err := verifyRunAsNonRoot(pod, c, tt.uid, tt.username)
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tt.want != "" && (err == nil || !strings.HasPrefix(err.Error(), tt.want)):
				t.Errorf("error %v, want %q", err, tt.want)
			}
		})
	}
}

func TestImageUser(t *testing.T) {
	tests := []struct {
		name     string
		img      *runtimeapi.Image
		uid      int64
		hasUID   bool
		username string
	}{
		{name: "numeric uid", img: &runtimeapi.Image{Uid: &runtimeapi.Int64Value{Value: 65534}}, uid: 65534, hasUID: true},
		{name: "uid 0", img: &runtimeapi.Image{Uid: &runtimeapi.Int64Value{Value: 0}}, uid: 0, hasUID: true},
		{name: "user name", img: &runtimeapi.Image{Username: "www-data"}, username: "www-data"},
		{name: "no user is root", img: &runtimeapi.Image{}, uid: 0, hasUID: true},
		{name: "unknown image is root", img: nil, uid: 0, hasUID: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			uid, name := imageUser(tt.img)
			if (uid != nil) != tt.hasUID || (uid != nil && *uid != tt.uid) || name != tt.username {
				t.Errorf("imageUser = (%v, %q), want (%d/%v, %q)", uid, name, tt.uid, tt.hasUID, tt.username)
			}
		})
	}
}

// managerWithEvents is manager() with its events readable.
func (r *syncRig) managerWithEvents() (*Manager, *record.FakeRecorder) {
	rec := record.NewFakeRecorder(1000)
	cfg := Config{RootDir: r.root, PodLogsDir: filepath.Join(r.root, "logs")}
	return New(cfg, Deps{Runtime: r.client, Images: r.client, Volumes: noVolumes{}, Env: fakeSecrets{}, Node: func() NodeFacts { return NodeFacts{Name: "node1"} }, Recorder: rec, Clock: clock.RealClock{}}), rec
}

// A container with runAsNonRoot whose image runs as root is never created: it
// waits in CreateContainerConfigError and the pod gets upstream's Failed event.
// One whose image names a non-root uid starts.
func TestRunAsNonRootRefusesARootImage(t *testing.T) {
	r := newSyncRig(t)
	ctx := context.Background()
	r.fake.SetImageUser("busybox:1", nil, "")
	r.fake.SetImageUser("nonroot:1", ptr.To[int64](1234), "")
	pod := syncPod("nonroot", v1.RestartPolicyNever, nil, "app", "ok")
	pod.Spec.SecurityContext = &v1.PodSecurityContext{RunAsNonRoot: ptr.To(true)}
	pod.Spec.Containers[1].Image = "nonroot:1"
	m, rec := r.managerWithEvents()

	res, err := m.SyncPod(ctx, pod, r.status(pod))
	if err == nil {
		t.Fatal("sync of a root container under runAsNonRoot succeeded")
	}
	want := `container has runAsNonRoot and image will run as root (pod: "nonroot_default(uid-nonroot)", container: app)`
	if w := res.Waiting["app"]; w.Reason != "CreateContainerConfigError" || w.Message != want {
		t.Errorf("app waiting = %+v, want CreateContainerConfigError %q", w, want)
	}
	if got := r.containers(pod, "app"); len(got) != 0 {
		t.Errorf("app containers = %v, want none created", got)
	}
	if got := r.containers(pod, "ok"); !slices.Equal(got, []runtimeapi.ContainerState{runtimeapi.ContainerState_CONTAINER_RUNNING}) {
		t.Errorf("ok containers = %v, want the non-root image running", got)
	}
	if events := drain(rec); !slices.Contains(events, "Warning Failed Error: "+want) {
		t.Errorf("events %q lack the Failed event", events)
	}
}
