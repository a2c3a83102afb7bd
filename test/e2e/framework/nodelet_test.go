package framework

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	"sigs.k8s.io/yaml"

	"github.com/nodelet/nodelet/internal/mountutil"
)

// fakeNodelet is a stand-in binary: it logs its arguments, exits 0 on SIGTERM and otherwise
// sleeps, so the framework's process handling can be tested without the rig.
const fakeNodelet = `#!/bin/sh
echo "fake-nodelet started: $*"
trap 'echo "fake-nodelet got TERM"; exit 0' TERM
while :; do sleep 0.1; done
`

func newTestFramework(t *testing.T) *Framework {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "fake-nodelet")
	if err := os.WriteFile(bin, []byte(fakeNodelet), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("NODELET_BIN", bin)
	return &Framework{T: t, Env: &RigEnv{
		RigDir:                   dir,
		NodeName:                 "node-x",
		NodeKubeconfig:           "/rig/node.kubeconfig",
		ContainerRuntimeEndpoint: "unix:///rig/containerd.sock",
		CACert:                   "/rig/ca.crt",
		BusyboxImage:             "nodelet.local/busybox:latest",
		NodeletRootBase:          filepath.Join(dir, "nodelet"),
	}}
}

func TestStartNodeletConfigAndArgs(t *testing.T) {
	f := newTestFramework(t)
	n := f.StartNodelet(NodeletOptions{
		KeepRuntimeState: true, KeepNode: true,
		Config:     func(c *kubeletconfigv1beta1.KubeletConfiguration) { c.MaxPods = 7 },
		ExtraArgs:  []string{"--extra=1"},
		Verbosity:  3,
		StaticPods: []*v1.Pod{{ObjectMeta: metav1.ObjectMeta{Name: "static-web"}}},
	})
	defer n.Stop()

	b, err := os.ReadFile(n.ConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	var cfg kubeletconfigv1beta1.KubeletConfiguration
	if err := yaml.UnmarshalStrict(b, &cfg); err != nil {
		t.Fatalf("config file does not decode: %v\n%s", err, b)
	}
	checks := []struct {
		name      string
		got, want any
	}{
		{"kind", cfg.Kind, "KubeletConfiguration"},
		{"apiVersion", cfg.APIVersion, "kubelet.config.k8s.io/v1beta1"},
		{"mutated maxPods", cfg.MaxPods, int32(7)},
		{"runtime endpoint", cfg.ContainerRuntimeEndpoint, "unix:///rig/containerd.sock"},
		{"cgroup driver", cfg.CgroupDriver, "cgroupfs"},
		{"failSwapOn", *cfg.FailSwapOn, false},
		{"client CA", cfg.Authentication.X509.ClientCAFile, "/rig/ca.crt"},
		{"authz mode", cfg.Authorization.Mode, kubeletconfigv1beta1.KubeletAuthorizationModeWebhook},
		{"static pod path", cfg.StaticPodPath, n.StaticPodDir},
		{"flush frequency set", cfg.Logging.FlushFrequency.Duration.Duration > 0, true},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
	if !strings.HasPrefix(n.Dir, f.Env.NodeletRootBase+"/") {
		t.Errorf("dir %s is not under %s", n.Dir, f.Env.NodeletRootBase)
	}
	if _, err := os.Stat(filepath.Join(n.StaticPodDir, "static-web.yaml")); err != nil {
		t.Errorf("static pod not written: %v", err)
	}
	wantArgs := []string{
		"--config=" + n.ConfigPath, "--kubeconfig=/rig/node.kubeconfig", "--hostname-override=node-x",
		"--root-dir=" + n.RootDir, "--v=3", "--extra=1",
	}
	if !slices.Equal(n.Args, wantArgs) {
		t.Errorf("args = %v, want %v", n.Args, wantArgs)
	}
	n.WaitForLog(t.Context(), "fake-nodelet started: "+strings.Join(wantArgs, " "), 10*time.Second)
}

func TestNodeletLifecycle(t *testing.T) {
	f := newTestFramework(t)
	n := f.StartNodelet(NodeletOptions{KeepRuntimeState: true, KeepNode: true, StopTimeout: 10 * time.Second})
	n.WaitForLog(t.Context(), "fake-nodelet started", 10*time.Second)
	first := n.Pid()

	n.Restart()
	if !n.Running() || n.Pid() == first {
		t.Fatalf("after Restart: running=%v pid=%d (was %d)", n.Running(), n.Pid(), first)
	}
	if got := strings.Count(n.Logs(), "fake-nodelet got TERM"); got != 1 {
		t.Errorf("TERM seen %d times after Restart, want 1; log:\n%s", got, n.Logs())
	}
	// The restarted process traps TERM only once its shell is up; wait for it.
	err := WaitFor(t.Context(), 10*time.Second, "second start", func(context.Context) (bool, error) {
		return strings.Count(n.Logs(), "fake-nodelet started") == 2, nil
	})
	if err != nil {
		t.Fatal(err)
	}

	n.Kill()
	if n.Running() {
		t.Fatal("still running after Kill")
	}
	if err := n.ExitError(); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Errorf("exit error after Kill = %v, want signal: killed", err)
	}
	if err := n.Stop(); err == nil {
		t.Errorf("Stop of a killed nodelet returned nil, want the kill's wait error")
	}
}

func TestWaitStopsWhenNodeletDies(t *testing.T) {
	f := newTestFramework(t)
	bin := filepath.Join(t.TempDir(), "dying-nodelet")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\necho 'fatal: bad config' >&2\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("NODELET_BIN", bin)
	n := f.StartNodelet(NodeletOptions{KeepRuntimeState: true, KeepNode: true})

	start := time.Now()
	err := f.waitFor(t.Context(), time.Minute, "something that never happens", func(context.Context) (bool, error) {
		return false, nil
	})
	var stop *StopError
	if !errors.As(err, &stop) {
		t.Fatalf("waitFor err = %v, want a StopError for the dead nodelet", err)
	}
	if !strings.Contains(err.Error(), "exit status 3") || !strings.Contains(err.Error(), "fatal: bad config") {
		t.Errorf("error %q lacks the exit status or the log tail", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("waitFor took %v to notice the exit", d)
	}
	// Once the test says it expects the exit, waits no longer stop on it.
	if err := n.WaitExit(5 * time.Second); err == nil {
		t.Errorf("WaitExit = nil, want exit status 3")
	}
	if err := f.checkNodelets(); err != nil {
		t.Errorf("checkNodelets after WaitExit = %v, want nil", err)
	}
}

func TestWaitForRetriesTransientErrors(t *testing.T) {
	calls := 0
	err := WaitFor(t.Context(), 10*time.Second, "third call", func(context.Context) (bool, error) {
		calls++
		if calls < 3 {
			return false, errors.New("transient")
		}
		return true, nil
	})
	if err != nil || calls != 3 {
		t.Fatalf("WaitFor = %v after %d calls, want nil after 3", err, calls)
	}
	err = WaitFor(t.Context(), 300*time.Millisecond, "never", func(context.Context) (bool, error) {
		return false, errors.New("still broken")
	})
	if err == nil || !strings.Contains(err.Error(), "still broken") || !strings.Contains(err.Error(), "never") {
		t.Fatalf("WaitFor timeout error = %v, want it to name the wait and the last error", err)
	}
}

// TestSwapBinary: SwapBinary replaces the running binary with another on the same command
// line; one whose --version is upstream's runs in a mount namespace where the kubelet's fixed
// device plugin directory is the root dir's, not the host's, while its mounts under the root
// dir reach the host; each binary logs to its own file.
func TestSwapBinary(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: mounts")
	}
	f := newTestFramework(t)
	dir := t.TempDir()
	nodelet, kubelet := filepath.Join(dir, "nodelet"), filepath.Join(dir, "kubelet")
	const fakeNodelet = `#!/bin/sh
[ "$1" = --version ] && { echo 'Kubernetes v1.37.2+nodelet'; exit 0; }
trap 'echo "fake-nodelet got TERM"; exit 0' TERM
echo "fake-nodelet started: $*"
while :; do sleep 0.1; done
`
	if err := os.WriteFile(nodelet, []byte(fakeNodelet), 0o755); err != nil {
		t.Fatal(err)
	}
	const fakeKubelet = `#!/bin/sh
[ "$1" = --version ] && { echo 'Kubernetes v1.37.2'; exit 0; }
trap 'echo "fake-kubelet got TERM"; exit 0' TERM
for a; do case $a in --root-dir=*) root=${a#--root-dir=} ;; esac; done
touch /var/lib/kubelet/device-plugins/swap-probe || exit 1
mkdir -p "$root/m" && mount -t tmpfs swap-probe "$root/m" || exit 1
echo "fake-kubelet started: $*"
while :; do sleep 0.1; done
`
	if err := os.WriteFile(kubelet, []byte(fakeKubelet), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("NODELET_BIN", nodelet)
	// After the framework's cleanup, which keeps a failed test's mounts for inspection.
	t.Cleanup(func() {
		if _, err := mountutil.UnmountAllUnder(f.Env.RigDir); err != nil {
			t.Error(err)
		}
	})
	n := f.StartNodelet(NodeletOptions{KeepRuntimeState: true, KeepNode: true, StopTimeout: 10 * time.Second})
	n.WaitForLog(t.Context(), "fake-nodelet started", 10*time.Second)
	args := slices.Clone(n.Args)

	n.SwapBinary(kubelet)
	if !n.Upstream || n.LogPath != filepath.Join(n.Dir, "kubelet.log") {
		t.Fatalf("after the swap: Upstream=%v LogPath=%s, want the kubelet's", n.Upstream, n.LogPath)
	}
	n.WaitForLog(t.Context(), "fake-kubelet started: "+strings.Join(args, " "), 10*time.Second)
	if _, err := os.Stat(filepath.Join(n.RootDir, "device-plugins", "swap-probe")); err != nil {
		t.Errorf("the kubelet's device plugin dir is not the root dir's: %v", err)
	}
	if _, err := os.Stat(filepath.Join(upstreamKubeletDevicePluginDir, "swap-probe")); err == nil {
		t.Errorf("the kubelet wrote into the host's %s", upstreamKubeletDevicePluginDir)
	}
	if mounted, err := mountutil.IsMountPoint(filepath.Join(n.RootDir, "m")); err != nil || !mounted {
		t.Errorf("the kubelet's mount under the root dir is not on the host: %v %v", mounted, err)
	}

	n.SwapBinary(nodelet)
	if n.Upstream || n.LogPath != filepath.Join(n.Dir, "nodelet.log") {
		t.Fatalf("after the swap back: Upstream=%v LogPath=%s, want nodelet's", n.Upstream, n.LogPath)
	}
	err := WaitFor(t.Context(), 10*time.Second, "nodelet's second start", func(context.Context) (bool, error) {
		return strings.Count(n.Logs(), "fake-nodelet started: "+strings.Join(args, " ")) == 2, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(n.Dir, "kubelet.log")); !strings.Contains(string(b), "fake-kubelet got TERM") {
		t.Errorf("kubelet.log lacks the kubelet's stop:\n%s", b)
	}
	if err := n.Stop(); err != nil {
		t.Errorf("Stop: %v", err)
	}
}
