package framework

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	logsapi "k8s.io/component-base/logs/api/v1"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/nodelet/nodelet/internal/mountutil"
)

// NodeletOptions say how StartNodelet runs the binary under test.
type NodeletOptions struct {
	// Config, if set, changes the generated KubeletConfiguration before it is written.
	Config func(*kubeletconfigv1beta1.KubeletConfiguration)
	// ExtraArgs are appended to the command line (after the framework's flags, so they win).
	ExtraArgs []string
	// Verbosity, if > 0, adds --v=<Verbosity>.
	Verbosity int
	// Env is added to the process environment.
	Env []string
	// StaticPods are written into staticPodPath before the start.
	StaticPods []*v1.Pod
	// KeepRuntimeState leaves sandboxes already in the runtime; by default every one is
	// removed first so that the test starts on an empty node.
	KeepRuntimeState bool
	// KeepNode leaves the Node and its Lease from an earlier test; by default both are
	// deleted first so that the test sees a fresh registration.
	KeepNode bool
	// StopTimeout bounds Stop's wait after SIGTERM before it kills (default 60s).
	StopTimeout time.Duration
	// Bin, if set, is the binary to start instead of NODELET_BIN: the upstream kubelet
	// (Framework.KubeletBin) takes the same command line. See Nodelet.SwapBinary.
	Bin string
	// BootstrapKubeconfig, if set, starts nodelet the kubeadm-join way: with
	// --bootstrap-kubeconfig=BootstrapKubeconfig, a --kubeconfig that does not exist yet
	// (Nodelet.KubeconfigPath) and --cert-dir=Nodelet.CertDir, both in the test's directory,
	// instead of the rig's ready-made node credential.
	BootstrapKubeconfig string
}

// Nodelet is a running (or stopped) nodelet process of one test. Its directory holds the
// config, the static pod dir, the root dir, the pod logs and the process log.
type Nodelet struct {
	Bin          string
	Dir          string // per-test directory under NODELET_ROOT_BASE
	RootDir      string // --root-dir
	ConfigPath   string // --config
	StaticPodDir string // staticPodPath
	PodLogsDir   string // podLogsDir
	// LogPath is the current binary's stdout and stderr: <Dir>/nodelet.log, or
	// <Dir>/kubelet.log while the upstream kubelet runs (SwapBinary).
	LogPath string
	// Upstream says Bin is the upstream kubelet (its --version does not name nodelet): it is
	// started in a mount namespace of its own where its fixed device plugin directory is
	// RootDir/device-plugins (see startKubelet).
	Upstream bool
	// KubeconfigPath is --kubeconfig; CertDir is --cert-dir ("" = nodelet's default), set with
	// NodeletOptions.BootstrapKubeconfig.
	KubeconfigPath string
	CertDir        string
	Config         *kubeletconfigv1beta1.KubeletConfiguration
	Args           []string

	f    *Framework
	opts NodeletOptions

	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan struct{} // closed when the current process has exited
	waitErr error
	// expectExit is set once the test has asked for (or waits for) the exit.
	expectExit bool
	// logPaths are the logs of every binary this Nodelet has run, for the failure output.
	logPaths []string
}

// unexpectedExit describes an exit the test did not ask for (nil while running or after
// Stop, Kill or WaitExit).
func (n *Nodelet) unexpectedExit() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil || n.expectExit || !n.exited() {
		return nil
	}
	return fmt.Errorf("%s exited unexpectedly (%s); log %s:\n%s", n.agent(), errOrOK(n.waitErr), n.LogPath, n.logTail(n.LogPath, 30))
}

// DefaultKubeletConfiguration is the configuration StartNodelet writes before
// NodeletOptions.Config changes it: the rig's runtime endpoint, cgroupfs, no swap check, x509 +
// webhook authentication and webhook authorization, dirs inside the test's directory.
func DefaultKubeletConfiguration(env *RigEnv, dir string) *kubeletconfigv1beta1.KubeletConfiguration {
	cfg := &kubeletconfigv1beta1.KubeletConfiguration{
		TypeMeta: metav1.TypeMeta{
			APIVersion: kubeletconfigv1beta1.SchemeGroupVersion.String(),
			Kind:       "KubeletConfiguration",
		},
		StaticPodPath:            filepath.Join(dir, "manifests"),
		PodLogsDir:               filepath.Join(dir, "pod-logs"),
		ContainerRuntimeEndpoint: env.ContainerRuntimeEndpoint,
		CgroupDriver:             "cgroupfs",
		CgroupRoot:               env.CgroupRoot,
		FailSwapOn:               ptr.To(false),
		// The rig's host has cgroup v1 (hybrid) and cannot have v2; upstream refuses v1 by default.
		FailCgroupV1: ptr.To(false),
		// Space-based image GC off (100, upstream's way to disable it): how full the host's
		// disk is belongs to the machine, not the test, and above 85% GC would remove the
		// rig's shared images whenever a test leaves them unused for two minutes. Tests of
		// image GC set their own thresholds.
		ImageGCHighThresholdPercent: ptr.To[int32](100),
		HealthzBindAddress:          "127.0.0.1",
		HealthzPort:                 ptr.To(env.NodeletHealthzPort),
		Port:                        env.NodeletPort,
		ReadOnlyPort:                0,
		TLSCertFile:                 env.KubeletServingCert,
		TLSPrivateKeyFile:           env.KubeletServingKey,
		ClusterDomain:               "cluster.local",
		Authentication: kubeletconfigv1beta1.KubeletAuthentication{
			X509:      kubeletconfigv1beta1.KubeletX509Authentication{ClientCAFile: env.CACert},
			Webhook:   kubeletconfigv1beta1.KubeletWebhookAuthentication{Enabled: ptr.To(true)},
			Anonymous: kubeletconfigv1beta1.KubeletAnonymousAuthentication{Enabled: ptr.To(false)},
		},
		Authorization: kubeletconfigv1beta1.KubeletAuthorization{Mode: kubeletconfigv1beta1.KubeletAuthorizationModeWebhook},
	}
	logsapi.SetRecommendedLoggingConfiguration(&cfg.Logging)
	return cfg
}

// StartNodelet is New(t).StartNodelet(opts).
func StartNodelet(t testing.TB, opts NodeletOptions) *Nodelet {
	t.Helper()
	return New(t).StartNodelet(opts)
}

// StartNodelet writes the configuration and starts the binary named by NODELET_BIN with
// --config, --kubeconfig=$NODE_KUBECONFIG, --hostname-override=$NODE_NAME, --root-dir and
// opts.ExtraArgs. It does not wait for the node to be ready (see WaitForNodeReady). At
// cleanup the process is stopped; on failure the tail of its log is printed and its
// directory is kept.
func (f *Framework) StartNodelet(opts NodeletOptions) *Nodelet {
	f.T.Helper()
	bin := opts.Bin
	if bin == "" {
		bin = os.Getenv("NODELET_BIN")
		if bin == "" {
			f.T.Fatalf("NODELET_BIN is not set: point it at the nodelet binary (hack/test-all.sh builds _output/nodelet)")
		}
	}
	if err := os.MkdirAll(f.Env.NodeletRootBase, 0o755); err != nil {
		f.T.Fatalf("creating %s: %v", f.Env.NodeletRootBase, err)
	}
	dir, err := os.MkdirTemp(f.Env.NodeletRootBase, strings.TrimSuffix(strings.TrimPrefix(NamespacePrefix(f.T.Name()), "e2e-"), "-")+"-")
	if err != nil {
		f.T.Fatalf("creating nodelet dir: %v", err)
	}
	n := &Nodelet{
		Dir:        dir,
		RootDir:    filepath.Join(dir, "root"),
		ConfigPath: filepath.Join(dir, "config.yaml"),
		f:          f,
		opts:       opts,
	}
	f.T.Cleanup(n.cleanup)
	if err := n.setBin(bin, opts.Bin != ""); err != nil {
		f.T.Fatal(err)
	}
	f.mu.Lock()
	f.nodelets = append(f.nodelets, n)
	f.mu.Unlock()

	n.Config = DefaultKubeletConfiguration(f.Env, dir)
	if opts.Config != nil {
		opts.Config(n.Config)
	}
	n.StaticPodDir = n.Config.StaticPodPath
	n.PodLogsDir = n.Config.PodLogsDir
	for _, d := range []string{n.RootDir, n.StaticPodDir, n.PodLogsDir} {
		if d == "" {
			continue
		}
		if err := os.MkdirAll(d, 0o755); err != nil {
			f.T.Fatalf("creating %s: %v", d, err)
		}
	}
	data, err := yaml.Marshal(n.Config)
	if err != nil {
		f.T.Fatalf("encoding KubeletConfiguration: %v", err)
	}
	if err := os.WriteFile(n.ConfigPath, data, 0o644); err != nil {
		f.T.Fatalf("writing %s: %v", n.ConfigPath, err)
	}
	for _, p := range opts.StaticPods {
		n.WriteStaticPod(p)
	}
	n.KubeconfigPath = f.Env.NodeKubeconfig
	if opts.BootstrapKubeconfig != "" {
		n.KubeconfigPath, n.CertDir = filepath.Join(dir, "kubelet.conf"), filepath.Join(dir, "pki")
	}
	n.Args = []string{
		"--config=" + n.ConfigPath,
		"--kubeconfig=" + n.KubeconfigPath,
		"--hostname-override=" + f.Env.NodeName,
		"--root-dir=" + n.RootDir,
	}
	if opts.BootstrapKubeconfig != "" {
		n.Args = append(n.Args, "--bootstrap-kubeconfig="+opts.BootstrapKubeconfig, "--cert-dir="+n.CertDir)
	}
	if opts.Verbosity > 0 {
		n.Args = append(n.Args, fmt.Sprintf("--v=%d", opts.Verbosity))
	}
	n.Args = append(n.Args, opts.ExtraArgs...)

	if !opts.KeepRuntimeState {
		// A full node left by the test before takes its own time to clear: each sandbox
		// has a deadline of its own there, the whole no fixed one.
		if k, err := f.CRI.RemoveAllPodSandboxes(context.Background()); err != nil {
			f.T.Fatalf("clearing the runtime before the start: %v", err)
		} else if k > 0 {
			f.T.Logf("removed %d pod sandboxes left by an earlier test", k)
		}
	}
	if !opts.KeepNode {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		f.deleteNode(ctx)
		cancel()
	}
	if err := n.start(); err != nil {
		f.T.Fatal(err)
	}
	return n
}

func (f *Framework) deleteNode(ctx context.Context) {
	f.T.Helper()
	err := f.Client.CoreV1().Nodes().Delete(ctx, f.Env.NodeName, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		f.T.Fatalf("deleting node %s left by an earlier test: %v", f.Env.NodeName, err)
	}
	err = f.Client.CoordinationV1().Leases("kube-node-lease").Delete(ctx, f.Env.NodeName, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		f.T.Fatalf("deleting lease %s left by an earlier test: %v", f.Env.NodeName, err)
	}
}

func (n *Nodelet) start() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd != nil && !n.exited() {
		return fmt.Errorf("starting %s: already running (pid %d)", n.agent(), n.cmd.Process.Pid)
	}
	logf, err := os.OpenFile(n.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("opening %s log: %w", n.agent(), err)
	}
	cmd := exec.Command(n.Bin, n.Args...)
	if n.Upstream {
		if cmd, err = n.kubeletCommand(); err != nil {
			logf.Close()
			return err
		}
	}
	startedAt := time.Now()
	n.f.mu.Lock()
	n.f.lastStart = startedAt
	n.f.mu.Unlock()
	fmt.Fprintf(logf, "=== %s framework: starting %s\n", startedAt.UTC().Format(time.RFC3339Nano), strings.Join(cmd.Args, " "))
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(os.Environ(), n.opts.Env...)
	// Die with the test binary, whatever kills it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("starting %s %s: %w", n.agent(), n.Bin, err)
	}
	done := make(chan struct{})
	n.cmd, n.done, n.waitErr, n.expectExit = cmd, done, nil, false
	agent := n.agent()
	go func() {
		err := cmd.Wait()
		fmt.Fprintf(logf, "=== %s framework: %s exited: %v\n", time.Now().UTC().Format(time.RFC3339Nano), agent, errOrOK(err))
		logf.Close()
		n.mu.Lock()
		n.waitErr = err
		n.mu.Unlock()
		close(done)
	}()
	return nil
}

func errOrOK(err error) string {
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}

// exited reports whether the current process has exited; callers hold mu or own n.done.
func (n *Nodelet) exited() bool {
	select {
	case <-n.done:
		return true
	default:
		return false
	}
}

// Pid is the current process's pid (0 before the first start).
func (n *Nodelet) Pid() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil {
		return 0
	}
	return n.cmd.Process.Pid
}

// Running reports whether the process is alive.
func (n *Nodelet) Running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.cmd != nil && !n.exited()
}

// ExitError is the process's wait error once it has exited (nil: exit status 0, or running).
func (n *Nodelet) ExitError() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.waitErr
}

// WaitExit waits up to timeout for the process to exit on its own and returns its wait error.
func (n *Nodelet) WaitExit(timeout time.Duration) error {
	n.mu.Lock()
	done := n.done
	n.expectExit = true
	n.mu.Unlock()
	if done == nil {
		return errors.New("nodelet was never started")
	}
	select {
	case <-done:
		return n.ExitError()
	case <-time.After(timeout):
		return fmt.Errorf("nodelet still running after %v", timeout)
	}
}

func (n *Nodelet) signal(sig syscall.Signal) (chan struct{}, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.expectExit = true
	if n.cmd == nil || n.exited() {
		return nil, nil
	}
	if err := n.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return nil, fmt.Errorf("sending %v to nodelet: %w", sig, err)
	}
	return n.done, nil
}

// Stop sends SIGTERM and waits for the exit (StopTimeout, default 60s); past that it kills
// the process and fails the test. It returns the process's wait error (a clean shutdown
// returns nil). Stopping a stopped nodelet is a no-op.
func (n *Nodelet) Stop() error {
	n.f.T.Helper()
	done, err := n.signal(syscall.SIGTERM)
	if err != nil {
		n.f.T.Fatal(err)
	}
	if done == nil {
		return n.ExitError()
	}
	timeout := n.opts.StopTimeout
	if timeout == 0 {
		timeout = 60 * time.Second
	}
	select {
	case <-done:
		return n.ExitError()
	case <-time.After(timeout):
		n.Kill()
		n.f.T.Errorf("%s did not exit within %v of SIGTERM; killed it", n.agent(), timeout)
		return n.ExitError()
	}
}

// Kill sends SIGKILL and waits for the exit: a crash, as far as the node is concerned.
func (n *Nodelet) Kill() {
	n.f.T.Helper()
	done, err := n.signal(syscall.SIGKILL)
	if err != nil {
		n.f.T.Fatal(err)
	}
	if done != nil {
		<-done
	}
}

// Restart stops the process (SIGTERM) and starts it again with the same configuration, root
// dir and log (configuration changes made to the file in between are picked up).
func (n *Nodelet) Restart() {
	n.f.T.Helper()
	_ = n.Stop()
	if err := n.start(); err != nil {
		n.f.T.Fatal(err)
	}
}

// WriteConfig rewrites the config file from n.Config (e.g. before Restart).
func (n *Nodelet) WriteConfig() {
	n.f.T.Helper()
	data, err := yaml.Marshal(n.Config)
	if err != nil {
		n.f.T.Fatalf("encoding KubeletConfiguration: %v", err)
	}
	if err := os.WriteFile(n.ConfigPath, data, 0o644); err != nil {
		n.f.T.Fatalf("writing %s: %v", n.ConfigPath, err)
	}
}

// WriteStaticPod writes pod as <staticPodPath>/<name>.yaml (atomically, via rename, so the
// agent never reads half a file).
func (n *Nodelet) WriteStaticPod(pod *v1.Pod) string {
	n.f.T.Helper()
	if pod.APIVersion == "" {
		pod.APIVersion, pod.Kind = "v1", "Pod"
	}
	data, err := yaml.Marshal(pod)
	if err != nil {
		n.f.T.Fatalf("encoding static pod %s: %v", pod.Name, err)
	}
	path := filepath.Join(n.StaticPodDir, pod.Name+".yaml")
	tmp := filepath.Join(filepath.Dir(n.StaticPodDir), "."+pod.Name+".yaml.tmp")
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		n.f.T.Fatalf("writing static pod: %v", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		n.f.T.Fatalf("writing static pod: %v", err)
	}
	return path
}

// RemoveStaticPod removes <staticPodPath>/<name>.yaml.
func (n *Nodelet) RemoveStaticPod(name string) {
	n.f.T.Helper()
	if err := os.Remove(filepath.Join(n.StaticPodDir, name+".yaml")); err != nil {
		n.f.T.Fatalf("removing static pod %s: %v", name, err)
	}
}

// Logs returns the process log so far (all starts).
func (n *Nodelet) Logs() string {
	b, err := os.ReadFile(n.LogPath)
	if err != nil {
		return fmt.Sprintf("<reading %s: %v>", n.LogPath, err)
	}
	return string(b)
}

// WaitForLog waits until the process log contains substr.
func (n *Nodelet) WaitForLog(ctx context.Context, substr string, timeout time.Duration) {
	n.f.T.Helper()
	err := n.f.waitFor(ctx, timeout, fmt.Sprintf("nodelet log to contain %q", substr), func(context.Context) (bool, error) {
		return strings.Contains(n.Logs(), substr), nil
	})
	if err != nil {
		n.f.T.Fatal(err)
	}
}

// HealthzURL is http://<healthzBindAddress>:<healthzPort>/healthz of this node agent's config
// (upstream's defaults 127.0.0.1 and 10248 when unset).
func (n *Nodelet) HealthzURL() string {
	port := int32(10248)
	if n.Config.HealthzPort != nil {
		port = *n.Config.HealthzPort
	}
	addr := n.Config.HealthzBindAddress
	if addr == "" {
		addr = "127.0.0.1"
	}
	return fmt.Sprintf("http://%s:%d/healthz", addr, port)
}

// WaitHealthy waits until http://<healthzBindAddress>:<healthzPort>/healthz answers 200.
func (n *Nodelet) WaitHealthy(ctx context.Context, timeout time.Duration) {
	n.f.T.Helper()
	url := n.HealthzURL()
	client := &http.Client{Timeout: 2 * time.Second}
	err := WaitFor(ctx, timeout, url, func(ctx context.Context) (bool, error) {
		if !n.Running() {
			return false, fmt.Errorf("nodelet exited: %v", n.ExitError())
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return false, err
		}
		resp, err := client.Do(req)
		if err != nil {
			return false, err
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		n.f.T.Fatal(err)
	}
}

// logTail is the last lines of a log, for failure output.
func (n *Nodelet) logTail(path string, lines int) string {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("<reading %s: %v>", path, err)
	}
	defer f.Close()
	var ring []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		ring = append(ring, sc.Text())
		if len(ring) > lines {
			ring = ring[1:]
		}
	}
	return strings.Join(ring, "\n")
}

func (n *Nodelet) cleanup() {
	t := n.f.T
	if n.Running() {
		done, _ := n.signal(syscall.SIGTERM)
		if done != nil {
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				t.Logf("%s did not exit within 30s of SIGTERM at cleanup; killing it", n.agent())
				if d, _ := n.signal(syscall.SIGKILL); d != nil {
					<-d
				}
			}
		}
	}
	if t.Failed() {
		for _, p := range n.logPaths {
			t.Logf("%s log tail (%s):\n%s", strings.TrimSuffix(filepath.Base(p), ".log"), p, n.logTail(p, 200))
		}
		t.Logf("keeping %s for inspection", n.Dir)
		return
	}
	// Never across a mount point the node agent left (its volume mounts):
	// unmounted first, and a mount that stays keeps what lies behind it.
	if _, err := mountutil.UnmountAndRemoveAll(n.Dir); err != nil {
		t.Logf("cleanup: %v", err)
	}
}
