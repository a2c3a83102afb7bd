package agent

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/config"
	"github.com/nodelet/nodelet/cri"
	"github.com/nodelet/nodelet/internal/podutil"
	"github.com/nodelet/nodelet/internal/testsupport/fakecri"
)

// TestKubeletStaticPodAdopted: nodelet starting where the upstream kubelet ran
// the same static pod (under the kubelet's UID, with its labels, annotations
// and container hash) takes that pod over as it runs: no sandbox or container
// is stopped or created, and the readiness probe runs in the kubelet's container.
func TestKubeletStaticPodAdopted(t *testing.T) {
	const kubeletUID = "3f0c2d1e4b5a69788796a5b4c3d2e1f0"
	var sandboxID, containerID string
	prepare := func(rt *fakecri.Runtime, opts *config.Options) {
		ctx := context.Background()
		podLabels := map[string]string{cri.LabelPodName: "web-node-1", cri.LabelPodNamespace: "default", cri.LabelPodUID: kubeletUID}
		sb := &runtimeapi.PodSandboxConfig{
			Metadata: &runtimeapi.PodSandboxMetadata{Name: "web-node-1", Namespace: "default", Uid: kubeletUID},
			Labels:   podLabels,
			Annotations: map[string]string{podutil.AnnotationConfigSource: podutil.SourceFile, podutil.AnnotationConfigHash: kubeletUID,
				podutil.AnnotationConfigSeen: "2026-12-07T10:00:00.000000000Z"},
			LogDirectory: filepath.Join(opts.Config.PodLogsDir, "default_web-node-1_"+kubeletUID),
		}
		// The kubelet made the log directory; the fake runtime writes no logs.
		if err := os.MkdirAll(filepath.Join(sb.LogDirectory, "app"), 0o755); err != nil {
			t.Fatal(err)
		}
		r, err := rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: sb})
		if err != nil {
			t.Fatal(err)
		}
		sandboxID = r.PodSandboxId
		labels := map[string]string{cri.LabelContainerName: "app"}
		for k, v := range podLabels {
			labels[k] = v
		}
		c, err := rt.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: sandboxID, SandboxConfig: sb, Config: &runtimeapi.ContainerConfig{
			Metadata: &runtimeapi.ContainerMetadata{Name: "app"}, Image: &runtimeapi.ImageSpec{Image: "registry.example/app:1"},
			LogPath: "app/0.log", Labels: labels,
			Annotations: map[string]string{
				cri.AnnotationContainerHash:             podutil.ContainerHash(&v1.Container{Name: "app", Image: "registry.example/app:1"}),
				cri.AnnotationContainerRestartCount:     "0",
				cri.AnnotationTerminationMessagePath:    "/dev/termination-log",
				cri.AnnotationTerminationMessagePolicy:  "File",
				cri.AnnotationPodTerminationGracePeriod: "30",
			},
		}})
		if err != nil {
			t.Fatal(err)
		}
		containerID = c.ContainerId
		if _, err := rt.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: containerID}); err != nil {
			t.Fatal(err)
		}
	}
	rt := buildRunStopOn(t, prepare, nil, func(*agent) {}, "kubelet API ports", "logind D-Bus connection", "DRA driver connections", "event broadcaster", "container runtime client")
	calls := rt.Calls()
	for _, m := range []string{"RunPodSandbox", "StopPodSandbox", "CreateContainer", "StopContainer", "RemoveContainer"} {
		if slices.Contains(calls, m) {
			t.Errorf("nodelet called %s: the kubelet's static pod was not adopted (calls %v)", m, calls)
		}
	}
	if !slices.Contains(calls, "ExecSync") {
		t.Errorf("the readiness probe did not run in the kubelet's container %s (calls %v)", containerID, calls)
	}
}
