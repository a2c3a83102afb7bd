//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/podruntime"
	"github.com/nodelet/nodelet/test/e2e/framework"
)

// TestImageVolume mounts images as volumes (volumes[].image): a data image built and imported
// locally (IfNotPresent, present: no pull), whole and by subPath, and the registry's private
// busybox pulled for the volume with the pod's imagePullSecret. The container reads the
// files, and its writes to the volume fail (image volumes are read-only). On a runtime
// without image volumes (containerd before 2.1) the container waits with
// CreateContainerConfigError naming the runtime.
func TestImageVolume(t *testing.T) {
	f := framework.New(t)
	ctx := context.Background()
	private := privateRegistry(t, f)
	ver, err := f.CRI.Version(ctx)
	if err != nil {
		t.Fatal(err)
	}
	unsupported := podruntime.ImageVolumeSupport(ver.GetRuntimeName(), ver.GetRuntimeVersion())
	t.Logf("runtime %s %s; image volumes supported: %v", ver.GetRuntimeName(), ver.GetRuntimeVersion(), unsupported == nil)

	data := fmt.Sprintf("nodelet.local/imagevol-data:%d", time.Now().Unix())
	tar := filepath.Join(t.TempDir(), "data.tar")
	run := func(name string, args ...string) {
		t.Helper()
		if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
			t.Fatalf("%s %v: %v\n%s", name, args, err, out)
		}
	}
	run(filepath.Join(f.Env.RigDir, "bin", "mkimage"), "-kind", "scratch", "-name", data, "-o", tar,
		"-text", `/data/hello.txt=hello from an image volume\n`, "-text", `/etc/app/config=mode=subpath\n`)
	run(f.Env.Ctr, "images", "import", tar)
	t.Cleanup(func() { _ = exec.Command(f.Env.Ctr, "images", "rm", data).Run() })

	ns := f.NewNamespace()
	private.createSecret(ctx, t, f, ns, "regcred")
	startNode(t, f, framework.NodeletOptions{})

	script := `cat /vol/data/hello.txt; cat /sub/config; test -x /priv/bin/busybox && echo private-busybox-mounted;` +
		` if touch /vol/x 2>/dev/null; then echo WRITABLE; else echo read-only; fi; sleep 3600`
	pod := f.BusyboxPod(ns, "imgvol", "sh", "-c", script)
	// The container runs the registry's busybox too: it has the rig busybox's image ID, and
	// once the pod pulled that ID with its secret, the pull records no longer take the
	// local name for a preloaded image (imagePullCredentialsVerificationPolicy).
	pod.Spec.Containers[0].Image, pod.Spec.Containers[0].ImagePullPolicy = private.image, v1.PullIfNotPresent
	pod.Spec.ImagePullSecrets = []v1.LocalObjectReference{{Name: "regcred"}}
	pod.Spec.Volumes = []v1.Volume{
		{Name: "data", VolumeSource: v1.VolumeSource{Image: &v1.ImageVolumeSource{Reference: data, PullPolicy: v1.PullIfNotPresent}}},
		{Name: "priv", VolumeSource: v1.VolumeSource{Image: &v1.ImageVolumeSource{Reference: private.image, PullPolicy: v1.PullAlways}}},
	}
	pod.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{
		{Name: "data", MountPath: "/vol"},
		{Name: "data", MountPath: "/sub", SubPath: "etc/app"},
		{Name: "priv", MountPath: "/priv"},
	}
	f.CreatePod(ctx, pod)

	if unsupported != nil {
		p := f.WaitForPod(ctx, ns, "imgvol", 2*time.Minute, "CreateContainerConfigError", func(p *v1.Pod) bool {
			return len(p.Status.ContainerStatuses) > 0 && p.Status.ContainerStatuses[0].State.Waiting != nil &&
				p.Status.ContainerStatuses[0].State.Waiting.Reason == "CreateContainerConfigError"
		})
		if msg := p.Status.ContainerStatuses[0].State.Waiting.Message; !strings.Contains(msg, "does not support image volumes") {
			t.Errorf("waiting message %q does not name the runtime's lack", msg)
		}
		return
	}

	f.WaitForPodReady(ctx, ns, "imgvol", 2*time.Minute)
	pulling := waitForEvent(ctx, t, f, ns, "imgvol", "Pulling", 30*time.Second)
	if want := fmt.Sprintf("Pulling image %q", private.image); pulling.Message != want {
		t.Errorf("Pulling event %q, want %q (the private image volume, pulled with the pod's secret)", pulling.Message, want)
	}
	var logs string
	err = framework.WaitFor(ctx, 30*time.Second, "the container's output", func(ctx context.Context) (bool, error) {
		raw, err := f.Client.CoreV1().Pods(ns).GetLogs("imgvol", &v1.PodLogOptions{}).DoRaw(ctx)
		logs = string(raw)
		return err == nil && (strings.Contains(logs, "read-only") || strings.Contains(logs, "WRITABLE")), nil
	})
	if err != nil {
		t.Fatalf("%v; logs so far %q", err, logs)
	}
	t.Logf("container output:\n%s", logs)
	for _, want := range []string{"hello from an image volume", "mode=subpath", "private-busybox-mounted", "read-only"} {
		if !strings.Contains(logs, want) {
			t.Errorf("container output lacks %q", want)
		}
	}
	if strings.Contains(logs, "WRITABLE") {
		t.Error("the image volume is writable")
	}
	f.DeletePod(ctx, ns, "imgvol", ptr.To[int64](0))
	f.WaitForPodGone(ctx, ns, "imgvol", time.Minute)
}
