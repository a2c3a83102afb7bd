//go:build chaos

package chaos

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodelet/nodelet/test/e2e/framework"
)

// rigDaemon is one of the rig's daemons as test/rig/up.sh started it: its pid in
// $RIG_DIR/run/<name>.pid, its output appended to $LOGS_DIR/<name>.log. The command line and
// environment are read from /proc before a fault, so that it comes back exactly as it was
// (containerd also needs the PATH up.sh gave it, to find its own shim).
type rigDaemon struct {
	name    string
	pidFile string
	logPath string
	argv    []string
	env     []string
	pid     int
}

// rigDaemonOf reads the daemon's pidfile and /proc entries; it fails the test when the pidfile
// does not name a live process of this rig (never another rig's, never the CI run's).
func rigDaemonOf(t testing.TB, f *framework.Framework, name string) *rigDaemon {
	t.Helper()
	d := &rigDaemon{
		name:    name,
		pidFile: filepath.Join(f.Env.RigDir, "run", name+".pid"),
		logPath: filepath.Join(f.Env.RigDir, "logs", name+".log"),
	}
	if l := f.Env.All["LOGS_DIR"]; l != "" {
		d.logPath = filepath.Join(l, name+".log")
	}
	b, err := os.ReadFile(d.pidFile)
	if err != nil {
		t.Fatalf("reading the %s pidfile: %v", name, err)
	}
	d.pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("%s: pidfile %s: %v", name, d.pidFile, err)
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", d.pid))
	if err != nil {
		t.Fatalf("%s (pid %d) is not running: %v", name, d.pid, err)
	}
	d.argv = splitNul(cmdline)
	if len(d.argv) == 0 || !strings.Contains(strings.Join(d.argv, " "), f.Env.RigDir) {
		t.Fatalf("pid %d of %s is not this rig's (%s): %q", d.pid, d.pidFile, f.Env.RigDir, d.argv)
	}
	environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", d.pid))
	if err != nil {
		t.Fatalf("reading the environment of %s (pid %d): %v", name, d.pid, err)
	}
	d.env = splitNul(environ)
	return d
}

func splitNul(b []byte) []string {
	var out []string
	for _, s := range bytes.Split(bytes.TrimRight(b, "\x00"), []byte{0}) {
		if len(s) > 0 {
			out = append(out, string(s))
		}
	}
	return out
}

// gone reports whether pid has exited (a zombie has: only its parent's wait is missing).
func gone(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	// pid (comm) state ...: comm may hold spaces, the state follows the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] == 'Z'
}

// stop sends sig and waits up to timeout for the exit; past it, SIGKILL. It returns when the
// process is gone.
func (d *rigDaemon) stop(t testing.TB, sig syscall.Signal, timeout time.Duration) {
	t.Helper()
	if err := syscall.Kill(d.pid, sig); err != nil {
		t.Fatalf("sending %v to %s (pid %d): %v", sig, d.name, d.pid, err)
	}
	deadline := time.Now().Add(timeout)
	for !gone(d.pid) {
		if time.Now().After(deadline) {
			if sig == syscall.SIGKILL {
				t.Fatalf("%s (pid %d) still there %v after SIGKILL", d.name, d.pid, timeout)
			}
			t.Logf("%s (pid %d) did not exit within %v of %v: SIGKILL", d.name, d.pid, timeout, sig)
			d.stop(t, syscall.SIGKILL, 10*time.Second)
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// start runs the daemon again as up.sh does (own session, detached: it outlives the test and
// down.sh stops it through the pidfile, which names the new pid).
func (d *rigDaemon) start(t testing.TB) {
	t.Helper()
	logf, err := os.OpenFile(d.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatalf("opening the %s log: %v", d.name, err)
	}
	defer logf.Close()
	fmt.Fprintf(logf, "=== %s chaos test %s: starting again: %s\n", time.Now().UTC().Format(time.RFC3339), t.Name(), strings.Join(d.argv, " "))
	// The shell backgrounds the daemon and exits at once: the daemon is reparented, never
	// left a zombie of the test binary, and $! is its pid (setsid does not fork: the
	// background child is no process group leader).
	cmd := exec.Command("/bin/sh", append([]string{"-c", `log=$1; shift; setsid "$@" </dev/null >>"$log" 2>&1 & echo $!`, "sh", d.logPath}, d.argv...)...)
	cmd.Env = d.env
	cmd.Stderr = logf
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("starting %s again: %v", d.name, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatalf("starting %s again: no pid (%q): %v", d.name, out, err)
	}
	d.pid = pid
	if err := os.WriteFile(d.pidFile, []byte(strconv.Itoa(pid)+"\n"), 0o644); err != nil {
		t.Fatalf("writing the %s pidfile: %v", d.name, err)
	}
}

// waitRuntimeBack waits until the rig's containerd answers CRI again.
func waitRuntimeBack(t testing.TB, ctx context.Context, f *framework.Framework, timeout time.Duration) {
	t.Helper()
	err := framework.WaitFor(ctx, timeout, "containerd to answer CRI again", func(ctx context.Context) (bool, error) {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_, err := f.CRI.Version(cctx)
		return err == nil, err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// waitAPIServerBack waits until the rig's kube-apiserver answers /readyz again.
func waitAPIServerBack(t testing.TB, ctx context.Context, f *framework.Framework, timeout time.Duration) {
	t.Helper()
	err := framework.WaitFor(ctx, timeout, "kube-apiserver /readyz", func(ctx context.Context) (bool, error) {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_, err := f.Client.CoreV1().RESTClient().Get().AbsPath("/readyz").DoRaw(cctx)
		return err == nil, err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// waitControllersBack waits until kube-controller-manager works again after the API server's
// restart: a new namespace gets its default ServiceAccount. Its informers were refused
// (RBAC not yet synced in the new API server) and back off; on a loaded machine that took
// longer than the next test's own 60 s wait for the same ServiceAccount, and failed it.
func waitControllersBack(t testing.TB, ctx context.Context, f *framework.Framework, timeout time.Duration) {
	t.Helper()
	start := time.Now()
	ns, err := f.Client.CoreV1().Namespaces().Create(ctx, &v1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "chaos-controllers-back-", Labels: map[string]string{"nodelet-e2e": "true"}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating a namespace to see the controllers back: %v", err)
	}
	defer func() {
		if err := f.Client.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{}); err != nil {
			t.Logf("deleting namespace %s: %v", ns.Name, err)
		}
	}()
	if err := f.WaitNamespaceReady(ctx, ns.Name, timeout); err != nil {
		t.Fatalf("kube-controller-manager back after the API server's restart: %v", err)
	}
	figure(t, "controllers_back_after", time.Since(start))
}

// nodeReady is the rig's Node's Ready condition (nil when it has none yet).
func nodeReady(ctx context.Context, f *framework.Framework) (*v1.NodeCondition, error) {
	n, err := f.Client.CoreV1().Nodes().Get(ctx, f.Env.NodeName, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == v1.NodeReady {
			return &n.Status.Conditions[i], nil
		}
	}
	return nil, nil
}

// waitNodeReadyCondition polls the Node until its Ready condition satisfies cond and returns
// how long that took (from the call) and the condition.
func waitNodeReadyCondition(t testing.TB, ctx context.Context, f *framework.Framework, timeout time.Duration, what string, cond func(v1.NodeCondition) bool) (time.Duration, v1.NodeCondition) {
	t.Helper()
	start := time.Now()
	var last v1.NodeCondition
	err := framework.WaitFor(ctx, timeout, "the node's Ready condition "+what, func(ctx context.Context) (bool, error) {
		c, err := nodeReady(ctx, f)
		if err != nil || c == nil {
			return false, err
		}
		last = *c
		return cond(*c), nil
	})
	if err != nil {
		t.Fatalf("%v; last Ready condition: %s %s: %q", err, last.Status, last.Reason, last.Message)
	}
	return time.Since(start), last
}

// healthzWatch polls nodelet's /healthz every interval (each request bounded by timeout) until
// stopped: a node agent whose loop blocks stops answering, or answers late.
type healthzWatch struct {
	stop chan struct{}
	done chan struct{}

	mu         sync.Mutex
	ok, bad    int // 200s; other answers
	errs       int // no answer within the timeout (or no connection)
	maxLatency time.Duration
	samples    []string // the first few bad answers and errors
}

func watchHealthz(n *framework.Nodelet, interval, timeout time.Duration) *healthzWatch {
	url := n.HealthzURL()
	client := &http.Client{Timeout: timeout}
	w := &healthzWatch{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			start := time.Now()
			resp, err := client.Get(url)
			lat := time.Since(start)
			var body []byte
			if err == nil {
				body = make([]byte, 512)
				k, _ := resp.Body.Read(body)
				body = body[:k]
				resp.Body.Close()
			}
			w.mu.Lock()
			w.maxLatency = max(w.maxLatency, lat)
			switch {
			case err != nil:
				w.errs++
				w.sample(fmt.Sprintf("%s: %v", start.UTC().Format("15:04:05.000"), err))
			case resp.StatusCode != http.StatusOK:
				w.bad++
				w.sample(fmt.Sprintf("%s: %d %q", start.UTC().Format("15:04:05.000"), resp.StatusCode, body))
			default:
				w.ok++
			}
			w.mu.Unlock()
			select {
			case <-w.stop:
				return
			case <-tick.C:
			}
		}
	}()
	return w
}

func (w *healthzWatch) sample(s string) {
	if len(w.samples) < 5 {
		w.samples = append(w.samples, s)
	}
}

// end stops the watch and waits for its goroutine.
func (w *healthzWatch) end() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
}

// hostUptime is the host's /proc/uptime (seconds): what the suite's containers write as a
// timestamp (the kernel's clock, shared with every container), with 10 ms precision.
func hostUptime(t testing.TB) float64 {
	t.Helper()
	b, err := os.ReadFile("/proc/uptime")
	if err != nil {
		t.Fatalf("reading /proc/uptime: %v", err)
	}
	fs := strings.Fields(string(b))
	if len(fs) == 0 {
		t.Fatalf("/proc/uptime: %q", b)
	}
	u, err := strconv.ParseFloat(fs[0], 64)
	if err != nil {
		t.Fatalf("/proc/uptime: %v", err)
	}
	return u
}

// uptimeStamp is the shell that writes /proc/uptime's first field, for container commands.
const uptimeStamp = `cut -d" " -f1 /proc/uptime`

// readStamps reads a file of uptime stamps, one a line (none when it does not exist).
func readStamps(t testing.TB, path string) []float64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatalf("reading %s: %v", path, err)
	}
	var out []float64
	for _, l := range strings.Fields(string(b)) {
		v, err := strconv.ParseFloat(l, 64)
		if err != nil {
			t.Fatalf("%s: line %q: %v", path, l, err)
		}
		out = append(out, v)
	}
	return out
}

// podContainers maps each pod's name to its one container's ID and restart count, as the
// API shows them.
type podContainer struct {
	id       string
	restarts int32
}

func podContainers(pods []v1.Pod) map[string]podContainer {
	out := map[string]podContainer{}
	for _, p := range pods {
		for _, cs := range p.Status.ContainerStatuses {
			out[p.Name] = podContainer{id: cs.ContainerID, restarts: cs.RestartCount}
		}
	}
	return out
}
