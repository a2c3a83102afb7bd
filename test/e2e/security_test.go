//go:build e2e

package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/internal/mountutil"
	"github.com/nodelet/nodelet/test/e2e/framework"
)

// TestSubPathSymlinkStaysInsideVolume is the CVE-2017-1002101 attack: an init
// container plants links out of a shared emptyDir (escape -> / and outside ->
// a host directory), then app containers mount the volume by those subPaths.
// They must fail with upstream's CreateContainerConfigError instead of
// getting the host's / or making nodelet create directories on the host,
// while a subPath that stays inside the volume works. Deleting the pod
// leaves no mount behind.
func TestSubPathSymlinkStaysInsideVolume(t *testing.T) {
	f := framework.New(t)
	ctx := context.Background()
	ns := f.NewNamespace()
	n := startNode(t, f, framework.NodeletOptions{})
	outside := filepath.Join(n.Dir, "outside")
	if err := os.Mkdir(outside, 0o755); err != nil {
		t.Fatal(err)
	}

	pod := f.BusyboxPod(ns, "planter", "sh", "-c", "cat /sub/marker; exec sleep 3600")
	pod.Spec.Volumes = []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}}
	pod.Spec.InitContainers = []v1.Container{{
		Name: "plant", Image: f.Env.BusyboxImage, ImagePullPolicy: v1.PullNever,
		Command:      []string{"sh", "-c", "ln -s / /data/escape && ln -s " + outside + " /data/outside && mkdir /data/ok && echo inside-the-volume > /data/ok/marker"},
		VolumeMounts: []v1.VolumeMount{{Name: "data", MountPath: "/data"}},
	}}
	inside := &pod.Spec.Containers[0]
	inside.Name = "inside"
	inside.VolumeMounts = []v1.VolumeMount{{Name: "data", MountPath: "/sub", SubPath: "ok"}}
	for _, c := range []struct{ name, sub string }{{"root", "escape"}, {"mkdir", "outside/a/b"}} {
		pod.Spec.Containers = append(pod.Spec.Containers, v1.Container{
			Name: c.name, Image: f.Env.BusyboxImage, ImagePullPolicy: v1.PullNever,
			Command:      []string{"sh", "-c", "ls /host; exec sleep 3600"},
			VolumeMounts: []v1.VolumeMount{{Name: "data", MountPath: "/host", SubPath: c.sub}},
		})
	}
	created := f.CreatePod(ctx, pod)

	wantMsg := func(c string) string {
		return `failed to prepare subPath for volumeMount "data" of container "` + c + `"`
	}
	got := f.WaitForPod(ctx, ns, "planter", 2*time.Minute, "to run 'inside' and refuse 'root' and 'mkdir'", func(p *v1.Pod) bool {
		refused, running := 0, false
		for _, cs := range p.Status.ContainerStatuses {
			switch {
			case cs.Name == "inside":
				running = cs.State.Running != nil
			case cs.State.Waiting != nil && cs.State.Waiting.Reason == "CreateContainerConfigError" && cs.State.Waiting.Message == wantMsg(cs.Name):
				refused++
			}
		}
		return running && refused == 2
	})
	for _, cs := range got.Status.ContainerStatuses {
		if cs.Name != "inside" && (cs.State.Running != nil || cs.LastTerminationState.Terminated != nil) {
			t.Errorf("container %s ran: %+v", cs.Name, cs)
		}
	}
	ev := waitForEvent(ctx, t, f, ns, "planter", "Failed", time.Minute)
	if !strings.Contains(ev.Message, "failed to prepare subPath for volumeMount") || strings.Contains(ev.Message, n.RootDir) {
		t.Errorf("Failed event %q: want upstream's message without host paths", ev.Message)
	}
	if entries, err := os.ReadDir(outside); err != nil || len(entries) != 0 {
		t.Errorf("nodelet created %v in the host directory the planted link points to (%v)", entries, err)
	}

	// The allowed subPath is a bind mount nodelet owns, showing only the volume's ok/.
	logFile := filepath.Join(n.PodLogsDir, ns+"_planter_"+string(created.UID), "inside", "0.log")
	err := framework.WaitFor(ctx, 30*time.Second, "the marker in "+logFile, func(context.Context) (bool, error) {
		b, err := os.ReadFile(logFile)
		return err == nil && strings.Contains(string(b), "stdout F inside-the-volume"), nil
	})
	if err != nil {
		t.Error(err)
	}
	subpaths := filepath.Join(n.RootDir, "pods", string(created.UID), "volume-subpaths")
	if m, err := mountutil.IsMountPoint(filepath.Join(subpaths, "data", "inside", "0")); err != nil || !m {
		t.Errorf("volume-subpaths/data/inside/0 is not a mount point (%v)", err)
	}
	if mps, _ := mountutil.PointsUnder(filepath.Join(subpaths, "data")); len(mps) != 1 {
		t.Errorf("sub path mounts %v, want only the allowed one", mps)
	}

	f.DeletePod(ctx, ns, "planter", nil)
	f.WaitForPodGone(ctx, ns, "planter", 2*time.Minute)
	podDir := filepath.Join(n.RootDir, "pods", string(created.UID))
	err = framework.WaitFor(ctx, 30*time.Second, "no mount left under "+podDir, func(context.Context) (bool, error) {
		mps, err := mountutil.PointsUnder(podDir)
		return err == nil && len(mps) == 0, err
	})
	if err != nil {
		t.Error(err)
	}
}

// TestSubPathExprPerPodDirectory is the StatefulSet pattern: replicas share a
// volume and each writes under subPathExpr $(POD_NAME), POD_NAME from a
// fieldRef. Each must get its own directory, named after the pod.
func TestSubPathExprPerPodDirectory(t *testing.T) {
	f := framework.New(t)
	ctx := context.Background()
	ns := f.NewNamespace()
	n := startNode(t, f, framework.NodeletOptions{})
	shared := filepath.Join(n.Dir, "shared")
	if err := os.Mkdir(shared, 0o777); err != nil {
		t.Fatal(err)
	}
	replicas := []string{"web-0", "web-1"}
	for _, name := range replicas {
		pod := f.BusyboxPod(ns, name, "sh", "-c", `echo "$POD_NAME" > /data/name && exec sleep 3600`)
		pod.Spec.Volumes = []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: shared}}}}
		c := &pod.Spec.Containers[0]
		c.Env = []v1.EnvVar{{Name: "POD_NAME", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.name"}}}}
		c.VolumeMounts = []v1.VolumeMount{{Name: "data", MountPath: "/data", SubPathExpr: "$(POD_NAME)"}}
		f.CreatePod(ctx, pod)
	}
	for _, name := range replicas {
		f.WaitForPod(ctx, ns, name, 2*time.Minute, "to be running", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })
		file := filepath.Join(shared, name, "name")
		err := framework.WaitFor(ctx, 30*time.Second, file, func(context.Context) (bool, error) {
			b, err := os.ReadFile(file)
			return err == nil && strings.TrimSpace(string(b)) == name, nil
		})
		if err != nil {
			t.Error(err)
		}
	}
	entries, err := os.ReadDir(shared)
	if err != nil {
		t.Fatal(err)
	}
	var dirs []string
	for _, e := range entries {
		dirs = append(dirs, e.Name())
	}
	if strings.Join(dirs, ",") != strings.Join(replicas, ",") {
		t.Errorf("shared volume holds %v, want one directory per pod %v", dirs, replicas)
	}
	for _, name := range replicas {
		f.DeletePod(ctx, ns, name, nil)
	}
	for _, name := range replicas {
		f.WaitForPodGone(ctx, ns, name, 2*time.Minute)
	}
}
