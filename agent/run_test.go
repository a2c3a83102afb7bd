package agent

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodelet/nodelet/config"
	"github.com/nodelet/nodelet/internal/testsupport/dbustest"
	"github.com/nodelet/nodelet/internal/testsupport/fakecri"
	"github.com/nodelet/nodelet/internal/testsupport/leakcheck"
)

// journal records what happened, in order.
type journal struct {
	mu      sync.Mutex
	entries []string
}

func (j *journal) add(format string, args ...any) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.entries = append(j.entries, fmt.Sprintf(format, args...))
}

func (j *journal) all() []string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return slices.Clone(j.entries)
}

// record makes every component note when its run returned (with its stage) and every
// closer when it ran.
func (a *agent) record(j *journal) {
	for i := range a.stages {
		for k := range a.stages[i].components {
			c := &a.stages[i].components[k]
			run, name, stage := c.run, c.name, i
			c.run = func(ctx context.Context) {
				run(ctx)
				j.add("returned %d %s", stage, name)
			}
		}
	}
	for i := range a.closers {
		c := &a.closers[i]
		f, name := c.close, c.name
		c.close = func() error {
			j.add("closed %s", name)
			return f()
		}
	}
}

// TestRunStopsStagesInOrderThenCloses: a stage's context ends only once every
// component of the stages before it returned, and the closers run (last added
// first) once every component returned.
func TestRunStopsStagesInOrderThenCloses(t *testing.T) {
	defer leakcheck.Check(t)()
	j := &journal{}
	comp := func(name string) component {
		return component{name: name, run: func(ctx context.Context) {
			<-ctx.Done()
			j.add("cancelled %s", name)
		}}
	}
	a := &agent{stages: []stage{
		{name: "first", components: []component{comp("a1"), comp("a2")}},
		{name: "second", components: []component{comp("b1")}},
		{name: "third", components: []component{comp("c1"), comp("c2")}},
	}}
	a.addCloser("x", func() error { j.add("closed x"); return nil })
	a.addCloser("y", func() error { j.add("closed y"); return nil })
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	a.run(ctx)

	got := j.all()
	stageOf := func(e string) int { return int(strings.Fields(e)[1][0] - 'a') }
	for i := 1; i < 5; i++ {
		if stageOf(got[i]) < stageOf(got[i-1]) {
			t.Errorf("stop order %v: %q stopped after %q", got, got[i-1], got[i])
		}
	}
	if want := []string{"closed y", "closed x"}; !slices.Equal(got[5:], want) {
		t.Errorf("closers ran as %v, want %v after every component", got[5:], want)
	}
}

// freePort is a TCP port on 127.0.0.1 that was free a moment ago.
func freePort(t *testing.T) int32 {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return int32(ln.Addr().(*net.TCPAddr).Port)
}

const probedStaticPod = `apiVersion: v1
kind: Pod
metadata: {name: web, namespace: default}
spec:
  containers:
  - name: app
    image: registry.example/app:1
    readinessProbe:
      exec: {command: ["ready"]}
      periodSeconds: 1
`

// testOptions is a standalone nodelet on the fake runtime: a static pod with a
// readiness probe, the kubelet API and healthz on free ports, graceful node shutdown
// over the fake logind; no QoS cgroups (the host's are not touched).
func testOptions(t *testing.T, endpoint string) *config.Options {
	t.Helper()
	manifests := t.TempDir()
	if err := os.WriteFile(filepath.Join(manifests, "web.yaml"), []byte(probedStaticPod), 0o600); err != nil {
		t.Fatal(err)
	}
	adj, err := os.ReadFile("/proc/self/oom_score_adj")
	if err != nil {
		t.Fatal(err)
	}
	oom, err := strconv.Atoi(strings.TrimSpace(string(adj)))
	if err != nil {
		t.Fatal(err)
	}
	kc := &kubeletconfigv1beta1.KubeletConfiguration{}
	config.SetDefaults(kc)
	kc.ContainerRuntimeEndpoint, kc.ImageServiceEndpoint = endpoint, endpoint
	kc.FailSwapOn = ptr.To(false)
	kc.FailCgroupV1 = ptr.To(false) // whatever the test machine has
	kc.CgroupsPerQOS = ptr.To(false)
	kc.OOMScoreAdj = ptr.To(int32(oom)) // the test process's own: unchanged
	var nofile syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &nofile); err != nil {
		t.Fatal(err)
	}
	kc.MaxOpenFiles = int64(nofile.Max)       // Go already raised the soft limit to it: unchanged
	kc.MakeIPTablesUtilChains = ptr.To(false) // the host's firewall: untouched
	kc.PodLogsDir = t.TempDir()
	kc.StaticPodPath = manifests
	kc.Address = "127.0.0.1"
	kc.Port, kc.ReadOnlyPort = freePort(t), 0
	kc.HealthzBindAddress, kc.HealthzPort = "127.0.0.1", ptr.To(freePort(t))
	kc.Authentication.Webhook.Enabled = ptr.To(false)
	kc.Authorization.Mode = kubeletconfigv1beta1.KubeletAuthorizationModeAlwaysAllow
	kc.ShutdownGracePeriod = metav1.Duration{Duration: 10 * time.Second}
	kc.ShutdownGracePeriodCriticalPods = metav1.Duration{Duration: 5 * time.Second}
	kc.EvictionHard = map[string]string{"memory.available": "1Ki"} // no pressure on a busy test machine
	return &config.Options{Config: kc, RootDir: t.TempDir(), CertDir: t.TempDir(), HostnameOverride: "node-1"}
}

// TestBuildRunStop builds nodelet on fakes (CRI, logind over a private D-Bus), runs it
// until its static pod is probed, and stops it: run returns within a bound, every
// closer (runtime client, D-Bus, listeners, events) runs after every component's Run
// returned, the stages stop in order, and no goroutine is left. Before, the D-Bus
// connections were closed before the goroutines using them were even told to stop,
// and the status manager, the probe workers and the services informer were never
// joined.
func TestBuildRunStop(t *testing.T) {
	buildRunStop(t, nil, "kubelet API ports", "logind D-Bus connection", "DRA driver connections", "event broadcaster", "container runtime client")
}

// TestBuildRunStopWithAPIServer is TestBuildRunStop with a kubeconfig: the API pod
// source, mirror pods, the status manager, the services informer, node status and
// Lease all run against a fake API server, and the API client connections close last
// but one.
func TestBuildRunStopWithAPIServer(t *testing.T) {
	api := newFakeAPIServer(t)
	buildRunStop(t, func(opts *config.Options) {
		opts.Kubeconfig = api.kubeconfig(t)
		opts.Config.ContentType = "application/json"
		opts.Config.RotateCertificates = false
	}, "kubelet API ports", "logind D-Bus connection", "DRA driver connections", "event broadcaster", "API client connections", "container runtime client")
	if api.requests() == 0 {
		t.Error("nodelet made no request to the API server")
	}
}

// TestBuildRunStopEventedPLEG is TestBuildRunStop with the EventedPLEG gate:
// the evented PLEG follows the runtime's event stream and is joined on stop.
func TestBuildRunStopEventedPLEG(t *testing.T) {
	rt := buildRunStop(t, func(opts *config.Options) {
		opts.Config.FeatureGates = map[string]bool{"EventedPLEG": true}
	}, "kubelet API ports", "logind D-Bus connection", "DRA driver connections", "event broadcaster", "container runtime client")
	if !slices.Contains(rt.Calls(), "GetContainerEvents") {
		t.Error("nodelet with EventedPLEG did not open the container event stream")
	}
}

// buildRunStop returns the fake runtime it ran on.
func buildRunStop(t *testing.T, configure func(*config.Options), wantClosers ...string) *fakecri.Runtime {
	return buildRunStopWhile(t, configure, nil, wantClosers...)
}

// buildRunStopWhile is buildRunStop that calls running, when not nil, once
// the static pod is probed and before the stop.
func buildRunStopWhile(t *testing.T, configure func(*config.Options), running func(*agent), wantClosers ...string) *fakecri.Runtime {
	return buildRunStopOn(t, nil, configure, running, wantClosers...)
}

// buildRunStopOn is buildRunStopWhile on a fake runtime that prepare, when not
// nil, fills before nodelet starts (its calls are not in Calls).
func buildRunStopOn(t *testing.T, prepare func(*fakecri.Runtime, *config.Options), configure func(*config.Options), running func(*agent), wantClosers ...string) *fakecri.Runtime {
	bus := dbustest.Start(t, 30*time.Second)
	t.Setenv(envSystemBus, bus.Addr())
	t.Setenv(envLogindDropIn, bus.DropIn)
	t.Setenv("NOTIFY_SOCKET", "")
	t.Setenv("WATCHDOG_USEC", "")
	rt := fakecri.New(t)
	rt.AddImage("registry.example/app:1")
	probed := make(chan struct{}, 1)
	rt.SetExecSync(func(_ string, cmd []string) ([]byte, []byte, int32) {
		select {
		case probed <- struct{}{}:
		default:
		}
		return nil, nil, 0
	})
	opts := testOptions(t, rt.Endpoint())
	if configure != nil {
		configure(opts)
	}
	if prepare != nil {
		prepare(rt, opts)
		rt.ResetCalls()
	}
	defer leakcheck.Check(t)()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// A temp /proc/sys with upstream's values: the test never writes the host's kernel.
	a, err := build(ctx, opts, hostPaths{procSys: upstreamProcSys(t)})
	if err != nil {
		t.Fatal(err)
	}
	j := &journal{}
	a.record(j)
	done := make(chan struct{})
	go func() { defer close(done); a.run(ctx) }()

	for what, ch := range map[string]<-chan struct{}{"the pod sources to sync": a.synced, "the static pod's readiness probe": probed} {
		select {
		case <-ch:
		case <-time.After(30 * time.Second):
			t.Fatalf("timed out waiting for %s", what)
		}
	}
	if running != nil {
		running(a)
	}
	j.add("stop")
	cancel()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("run did not return within 30s of the stop; journal: %v", j.all())
	}

	// The inhibitor lock went with the logind connection: once the fake drops its own
	// copies, nobody holds it.
	bus.Logind.DropOwnCopies()
	for _, in := range bus.Logind.Inhibits() {
		select {
		case <-in.Closed():
		case <-time.After(10 * time.Second):
			t.Error("logind's inhibitor lock is still held after run returned")
		}
	}

	got := j.all()
	t.Logf("journal: %q", got)
	stop := slices.Index(got, "stop")
	lastReturn, firstClose := -1, len(got)
	stage := 0
	var closed []string
	for i, e := range got {
		switch f := strings.Fields(e); f[0] {
		case "returned":
			lastReturn = i
			if i > stop {
				s, _ := strconv.Atoi(f[1])
				if s < stage {
					t.Errorf("%q returned after a component of stage %d", e, stage)
				}
				stage = s
			}
		case "closed":
			firstClose = min(firstClose, i)
			closed = append(closed, strings.TrimPrefix(e, "closed "))
		}
	}
	if lastReturn > firstClose {
		t.Errorf("a closer ran before every component returned: %v", got)
	}
	if !slices.Equal(closed, wantClosers) {
		t.Errorf("closers ran as %v, want %v", closed, wantClosers)
	}
	return rt
}
