package agent

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/config"
	"github.com/nodelet/nodelet/cri"
	"github.com/nodelet/nodelet/internal/testsupport/fakecri"
	"github.com/nodelet/nodelet/logrotate"
)

// TestLogRotationConfig: the four containerLog* fields (upstream defaults
// 10Mi, 5, 1, 10s) make the container log manager, and a manager built from
// containerLogMaxSize 1Mi rotates a 2 MiB log of a running container; a
// negative size turns rotation off, as upstream.
func TestLogRotationConfig(t *testing.T) {
	def := &kubeletconfigv1beta1.KubeletConfiguration{}
	config.SetDefaults(def)
	cfg, ok, err := logRotationConfig(def, config.Resolve(def).LogRotation)
	want := logrotate.Config{PodLogsDir: "/var/log/pods", Policy: logrotate.Policy{MaxSize: 10 << 20, MaxFiles: 5}, Workers: 1, Interval: 10 * time.Second}
	if err != nil || !ok || cfg != want {
		t.Errorf("defaults: %+v, %v, %v; want %+v", cfg, ok, err, want)
	}

	off := def.DeepCopy()
	off.ContainerLogMaxSize = "-1"
	if m, err := newLogRotation(off, config.Resolve(off).LogRotation, nil, nil); m != nil || err != nil {
		t.Errorf("containerLogMaxSize -1: %v, %v; want no manager", m, err)
	}

	kc := &kubeletconfigv1beta1.KubeletConfiguration{
		PodLogsDir: t.TempDir(), ContainerLogMaxSize: "1Mi", ContainerLogMaxFiles: ptr.To[int32](3),
		ContainerLogMaxWorkers: ptr.To[int32](2), ContainerLogMonitorInterval: &metav1.Duration{Duration: 3 * time.Second},
	}
	config.SetDefaults(kc)
	cfg, ok, err = logRotationConfig(kc, config.Resolve(kc).LogRotation)
	want = logrotate.Config{PodLogsDir: kc.PodLogsDir, Policy: logrotate.Policy{MaxSize: 1 << 20, MaxFiles: 3}, Workers: 2, Interval: 3 * time.Second}
	if err != nil || !ok || cfg != want {
		t.Fatalf("set: %+v, %v, %v; want %+v", cfg, ok, err, want)
	}

	ctx := context.Background()
	fake := fakecri.New(t)
	fake.AddImage("busybox")
	rt, err := cri.New(ctx, fake.Endpoint(), "", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close(ctx) })
	logDir := filepath.Join(kc.PodLogsDir, "default_chatty_uid1")
	sandbox := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: "chatty", Namespace: "default", Uid: "uid1"},
		LogDirectory: logDir,
	}
	sb, err := rt.RunPodSandbox(ctx, sandbox, "")
	if err != nil {
		t.Fatal(err)
	}
	id, err := rt.CreateContainer(ctx, sb, &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "app"}, Image: &runtimeapi.ImageSpec{Image: "busybox"}, LogPath: "app/0.log",
	}, sandbox)
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.StartContainer(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(logDir, "app"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(logDir, "app", "0.log"), bytes.Repeat([]byte("x"), 2<<20), 0o640); err != nil {
		t.Fatal(err)
	}
	clk := testingclock.NewFakeClock(time.Date(2026, 12, 5, 14, 0, 0, 0, time.Local))
	m, err := newLogRotation(kc, config.Resolve(kc).LogRotation, rt, clk)
	if err != nil || m == nil {
		t.Fatalf("newLogRotation: %v, %v", m, err)
	}
	if err := m.RotateAll(ctx); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(filepath.Join(logDir, "app"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if want := []string{"0.log", "0.log.20261205-140000"}; !slices.Equal(names, want) {
		t.Errorf("log dir after a pass: %v, want %v (the runtime reopened a new 0.log)", names, want)
	}
}
