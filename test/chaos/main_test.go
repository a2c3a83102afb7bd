//go:build chaos

package chaos

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/test/e2e/framework"
)

// The suite's counts: trimmed for CI (hack/test-all.sh runs the suite within its budget on
// 2 cores); the flags raise them to the figures, e.g.
// `go test -tags chaos ./test/chaos/ -args -chaos.churn=1000`.
var (
	burstPods  = flag.Int("chaos.burst", 50, "TestNodeletKilledMidBurst: pods created at once")
	fullPods   = flag.Int("chaos.pods", 110, "TestNodeletRestartWithFullNode: running pods (maxPods is max(110, this))")
	churnPods  = flag.Int("chaos.churn", 100, "TestChurn: pod create/delete cycles (the issue's figure is 1000)")
	churnBatch = flag.Int("chaos.churn-batch", 50, "TestChurn: pods created (then deleted) at once")
	statePods  = flag.Int("chaos.state-pods", 5, "TestCorruptStateFiles: running pods")
	stateEach  = flag.Bool("chaos.state-each", false, "TestCorruptStateFiles: corrupt one file per start even when corrupting all at once passes")
)

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(m.Run())
}

// creators is how many goroutines create (or delete) pods at once: enough that the API
// server, not the test, sets the pace of a burst.
const creators = 20

// figure logs one measured value as `CHAOS <test> <name>=<value>`, so that a run's figures
// are one grep away (`grep CHAOS`).
func figure(t testing.TB, name string, value any) {
	t.Helper()
	if d, ok := value.(time.Duration); ok {
		value = d.Round(10 * time.Millisecond)
	}
	t.Logf("CHAOS %s %s=%v", t.Name(), name, value)
}

// loadavg is /proc/loadavg's first three fields: the machine is shared, figures are noisy.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], "/")
}

// startNode starts nodelet with maxPods for count pods and waits for the node to be Ready.
// extra, if set, changes the configuration further.
func startNode(t *testing.T, f *framework.Framework, count int, extra func(*kubeletconfigv1beta1.KubeletConfiguration)) *framework.Nodelet {
	t.Helper()
	n := f.StartNodelet(framework.NodeletOptions{Config: func(c *kubeletconfigv1beta1.KubeletConfiguration) {
		c.MaxPods = int32(max(110, count))
		if extra != nil {
			extra(c)
		}
	}})
	f.WaitForNodeReady(context.Background(), 2*time.Minute)
	return n
}

// fastClient is an admin client without client-side throttling: a burst's creates must not
// queue in the test.
func fastClient(t testing.TB, f *framework.Framework) kubernetes.Interface {
	t.Helper()
	cfg := rest.CopyConfig(f.RestConfig)
	cfg.QPS, cfg.Burst = 1000, 1000
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatalf("building the test's client: %v", err)
	}
	return cs
}

// sleepPod is the suite's plain pod: busybox `sleep`, pod network, no service account
// token, bound to the node (the rig runs no scheduler for the test's pods).
func sleepPod(f *framework.Framework, ns, name string) *v1.Pod {
	p := f.BusyboxPod(ns, name, "sleep", "3600")
	p.Spec.NodeName = f.Env.NodeName
	p.Spec.AutomountServiceAccountToken = ptr.To(false)
	return p
}

// podNames is prefix-000 ... prefix-<count-1>.
func podNames(prefix string, count int) []string {
	names := make([]string, count)
	for i := range names {
		names[i] = fmt.Sprintf("%s-%03d", prefix, i)
	}
	return names
}

// concurrently runs fn for every name with `creators` goroutines and returns the errors,
// joined before it returns.
func concurrently(names []string, fn func(name string) error) []error {
	ch := make(chan string)
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
	)
	for range min(creators, len(names)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for name := range ch {
				if err := fn(name); err != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("%s: %w", name, err))
					mu.Unlock()
				}
			}
		}()
	}
	for _, n := range names {
		ch <- n
	}
	close(ch)
	wg.Wait()
	return errs
}

// createPods creates every pod (make builds each) with `creators` at once and fails the
// test on any error.
func createPods(t testing.TB, ctx context.Context, cs kubernetes.Interface, names []string, mk func(name string) *v1.Pod) {
	t.Helper()
	errs := concurrently(names, func(name string) error {
		p := mk(name)
		_, err := cs.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{})
		return err
	})
	if len(errs) > 0 {
		t.Fatalf("creating %d pods: %d failed, first: %v", len(names), len(errs), errs[0])
	}
}

// podSummary counts a namespace's pods by what the user checks.
type podSummary struct {
	total, running, ready, restarts int
	notReady                        []string // names of pods not Running+Ready, sorted
}

func summarize(pods []v1.Pod) podSummary {
	var s podSummary
	for i := range pods {
		p := &pods[i]
		if p.Status.Phase == v1.PodRunning {
			s.running++
		}
		if framework.IsPodReady(p) {
			s.ready++
		}
		if p.Status.Phase != v1.PodRunning || !framework.IsPodReady(p) {
			s.notReady = append(s.notReady, p.Name)
		}
		for _, cs := range p.Status.ContainerStatuses {
			s.restarts += int(cs.RestartCount)
		}
	}
	s.total = len(pods)
	sort.Strings(s.notReady)
	return s
}

func listPods(ctx context.Context, cs kubernetes.Interface, ns string) ([]v1.Pod, error) {
	l, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing pods in %s: %w", ns, err)
	}
	return l.Items, nil
}

// waitAllReady waits until ns has exactly count pods, all Running and Ready, and returns them.
func waitAllReady(t testing.TB, ctx context.Context, cs kubernetes.Interface, ns string, count int, timeout time.Duration) []v1.Pod {
	t.Helper()
	var pods []v1.Pod
	var s podSummary
	err := framework.WaitFor(ctx, timeout, fmt.Sprintf("%d pods Running and Ready in %s", count, ns), func(ctx context.Context) (bool, error) {
		p, err := listPods(ctx, cs, ns)
		if err != nil {
			return false, err
		}
		pods, s = p, summarize(p)
		return s.total == count && len(s.notReady) == 0, nil
	})
	if err != nil {
		t.Fatalf("%v\n%d pods, %d Running, %d Ready; not Running+Ready: %s", err, s.total, s.running, s.ready, firstN(s.notReady, 20))
	}
	return pods
}

// waitAllGone waits until ns has no pods left in the API.
func waitAllGone(t testing.TB, ctx context.Context, cs kubernetes.Interface, ns string, timeout time.Duration) {
	t.Helper()
	left := -1
	err := framework.WaitFor(ctx, timeout, "every pod in "+ns+" gone from the API", func(ctx context.Context) (bool, error) {
		p, err := listPods(ctx, cs, ns)
		if err != nil {
			return false, err
		}
		left = len(p)
		return left == 0, nil
	})
	if err != nil {
		t.Fatalf("%v (%d left)", err, left)
	}
}

func firstN(s []string, n int) string {
	if len(s) <= n {
		return strings.Join(s, ", ")
	}
	return strings.Join(s[:n], ", ") + fmt.Sprintf(" ... (%d more)", len(s)-n)
}

// runtimeView is what containerd holds for a set of API pods.
type runtimeView struct {
	// problems a user would see in `crictl pods` / `crictl ps -a` (duplicates, orphans,
	// missing pods), one line each.
	problems []string
	// leaked are containers CRI reports not running while containerd keeps a task for them
	// that never started (CREATED): a start cut off after containerd made the task. CRI can
	// neither stop nor remove them ("cannot delete running task"); that is containerd's leak,
	// not a pod started twice, so they are counted apart and left out of problems.
	leaked []string
}

// runtimeCheck is what containerd holds for a set of API pods (see runtimeView). A container
// CRI reports not running whose task runs is a problem: a second copy of it runs.
func runtimeCheck(ctx context.Context, c *framework.CRIClient, pods []v1.Pod) (runtimeView, error) {
	var view runtimeView
	sbs, err := c.PodSandboxes(ctx, nil)
	if err != nil {
		return view, err
	}
	ctrs, err := c.Containers(ctx, nil)
	if err != nil {
		return view, err
	}
	tasks, err := c.Tasks(ctx)
	if err != nil {
		return view, err
	}
	want := map[string]string{} // uid -> ns/name
	for _, p := range pods {
		want[string(p.UID)] = p.Namespace + "/" + p.Name
	}
	sbByUID := map[string][]string{}
	ctrByUID := map[string][]string{}
	for _, sb := range sbs {
		uid := sb.GetMetadata().GetUid()
		desc := fmt.Sprintf("%s(%s %s)", short(sb.Id), sb.GetMetadata().GetName(), sb.State)
		if _, ok := want[uid]; !ok {
			view.problems = append(view.problems, "orphan sandbox "+desc+" of uid "+uid)
			continue
		}
		sbByUID[uid] = append(sbByUID[uid], desc)
	}
	for _, ctr := range ctrs {
		uid := ctr.Labels[framework.LabelPodUID]
		desc := fmt.Sprintf("%s(%s attempt %d %s sandbox %s%s)", short(ctr.Id), ctr.GetMetadata().GetName(), ctr.GetMetadata().GetAttempt(), ctr.State, short(ctr.PodSandboxId), whyNotRunning(ctx, c, ctr))
		if ctr.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
			switch task := tasks[ctr.Id]; task {
			case "CREATED":
				view.leaked = append(view.leaked, fmt.Sprintf("%s of %s: containerd task %s", desc, want[uid], task))
				continue
			case "RUNNING", "PAUSING", "PAUSED":
				view.problems = append(view.problems, fmt.Sprintf("container %s of %s: containerd task %s behind it", desc, want[uid], task))
			}
		}
		if _, ok := want[uid]; !ok {
			view.problems = append(view.problems, "orphan container "+desc+" of uid "+uid)
			continue
		}
		ctrByUID[uid] = append(ctrByUID[uid], desc)
	}
	uids := make([]string, 0, len(want))
	for uid := range want {
		uids = append(uids, uid)
	}
	sort.Slice(uids, func(i, j int) bool { return want[uids[i]] < want[uids[j]] })
	for _, uid := range uids {
		if n := len(sbByUID[uid]); n != 1 {
			view.problems = append(view.problems, fmt.Sprintf("pod %s has %d sandboxes: %s", want[uid], n, strings.Join(sbByUID[uid], ", ")))
		}
		if n := len(ctrByUID[uid]); n != 1 {
			view.problems = append(view.problems, fmt.Sprintf("pod %s has %d containers: %s", want[uid], n, strings.Join(ctrByUID[uid], ", ")))
		}
	}
	return view, nil
}

// reportLeakedTasks prints the containers containerd keeps a never-started task for (see
// runtimeView.leaked): a figure and one line each, not a failure. The framework's next
// cleanup deletes those tasks with ctr.
func reportLeakedTasks(t *testing.T, leaked []string) {
	t.Helper()
	figure(t, "runtime_leaked_tasks", len(leaked))
	for _, l := range leaked {
		t.Logf("containerd kept a task for a cut start (its leak; not started twice): %s", l)
	}
}

// whyNotRunning is ", exit <code> <reason>: <message>" for a container that is not running
// (what `crictl inspect` would show), "" otherwise.
func whyNotRunning(ctx context.Context, c *framework.CRIClient, ctr *runtimeapi.Container) string {
	if ctr.State == runtimeapi.ContainerState_CONTAINER_RUNNING {
		return ""
	}
	st, err := c.Runtime.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: ctr.Id})
	if err != nil {
		return fmt.Sprintf(", status: %v", err)
	}
	s := st.GetStatus()
	// StartedAt tells a container that ran (then died or was lost) from a start cut off
	// (StartedAt 0), which nodelet replaces without counting a restart.
	return fmt.Sprintf(", exit %d %s: %q, startedAt %d", s.GetExitCode(), s.GetReason(), s.GetMessage(), s.GetStartedAt())
}

func short(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// procFigures is what /proc says about a process: threads, open fds, RSS (bytes).
type procFigures struct {
	threads, fds int
	rss          int64
}

func readProc(pid int) (procFigures, error) {
	var pf procFigures
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return pf, fmt.Errorf("reading the status of pid %d: %w", pid, err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(l, ":")
		if !ok {
			continue
		}
		fs := strings.Fields(v)
		if len(fs) == 0 {
			continue
		}
		n, err := strconv.ParseInt(fs[0], 10, 64)
		if err != nil {
			continue
		}
		switch k {
		case "Threads":
			pf.threads = int(n)
		case "VmRSS":
			pf.rss = n << 10 // kB
		}
	}
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return pf, fmt.Errorf("listing the fds of pid %d: %w", pid, err)
	}
	pf.fds = len(ents)
	return pf, nil
}

// nodeMetrics is the node agent's /metrics, through the API server's node proxy.
func nodeMetrics(ctx context.Context, f *framework.Framework) (string, error) {
	b, err := f.Client.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes", f.Env.NodeName, "proxy", "metrics").DoRaw(ctx)
	if err != nil {
		return "", fmt.Errorf("reading /metrics of node %s: %w", f.Env.NodeName, err)
	}
	return string(b), nil
}

// metricValue is the value of a series (name with its labels as exposed) in a Prometheus
// text exposition, and whether it is there.
func metricValue(exposition, name string) (float64, bool) {
	for _, l := range strings.Split(exposition, "\n") {
		if rest, ok := strings.CutPrefix(l, name+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			if err == nil {
				return v, true
			}
		}
	}
	return 0, false
}

// cgroupHierarchies are the mounted cgroup hierarchies' roots: every v1 controller
// hierarchy, the named systemd one and the v2 (unified) one.
func cgroupHierarchies() ([]string, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("reading mountinfo: %w", err)
	}
	seen := map[string]bool{}
	var roots []string
	for _, l := range strings.Split(string(b), "\n") {
		pre, post, ok := strings.Cut(l, " - ")
		if !ok {
			continue
		}
		pf, qf := strings.Fields(pre), strings.Fields(post)
		if len(pf) < 5 || len(qf) < 1 || (qf[0] != "cgroup" && qf[0] != "cgroup2") {
			continue
		}
		if mp := pf[4]; !seen[mp] {
			seen[mp] = true
			roots = append(roots, mp)
		}
	}
	sort.Strings(roots)
	return roots, nil
}

// mountsUnder lists the mount points below dir (from this process's mountinfo: the test
// runs in the host's mount namespace, as nodelet does).
func mountsUnder(dir string) ([]string, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("reading mountinfo: %w", err)
	}
	prefix := filepath.Clean(dir) + "/"
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		fs := strings.Fields(l)
		if len(fs) > 4 && strings.HasPrefix(fs[4], prefix) {
			out = append(out, fs[4])
		}
	}
	return out, nil
}

// cutStartsReplaced counts the containers nodelet found with their start cut off by a
// crash (never ran) and replaced with the same attempt, from its log (podruntime's line).
func cutStartsReplaced(n *framework.Nodelet) int {
	return strings.Count(n.Logs(), "Removed a container whose start was cut off")
}
