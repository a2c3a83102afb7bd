//go:build chaos

package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/test/e2e/framework"
)

// gcWait is how long leftovers of a crash (a dead sandbox, a created-never-started
// container) may take to go: one container GC period (1 min, upstream's) and a margin.
const gcWait = 75 * time.Second

// TestNodeletKilledMidBurst creates -chaos.burst pods at once, SIGKILLs nodelet once a third
// of them run and restarts it at once. Every pod must end Running and Ready with 0
// restarts, and containerd must hold exactly one sandbox and one container per pod: no pod
// started twice (no second RUNNING sandbox or container at any time after the restart), and
// what the crash left half made gone within one GC period.
func TestNodeletKilledMidBurst(t *testing.T) {
	f := framework.New(t)
	ctx := context.Background()
	ns := f.NewNamespace()
	count := *burstPods
	n := startNode(t, f, count, nil)
	cs := fastClient(t, f)

	names := podNames("burst", count)
	start := time.Now()
	created := make(chan []error, 1)
	go func() {
		created <- concurrently(names, func(name string) error {
			_, err := cs.CoreV1().Pods(ns).Create(ctx, sleepPod(f, ns, name), metav1.CreateOptions{})
			return err
		})
	}()
	threshold := max(1, count/3)
	var atKill podSummary
	err := framework.WaitFor(ctx, 3*time.Minute, fmt.Sprintf("%d of %d pods Running", threshold, count), func(ctx context.Context) (bool, error) {
		pods, err := listPods(ctx, cs, ns)
		if err != nil {
			return false, err
		}
		atKill = summarize(pods)
		return atKill.running >= threshold, nil
	})
	if err != nil {
		<-created
		t.Fatal(err)
	}
	n.Kill()
	killedAt := time.Since(start)
	sbs, _ := f.CRI.PodSandboxes(ctx, nil)
	ctrs, _ := f.CRI.Containers(ctx, nil)
	figure(t, "pods", count)
	figure(t, "killed_after", killedAt)
	figure(t, "running_at_kill", atKill.running)
	figure(t, "sandboxes_at_kill", len(sbs))
	figure(t, "containers_at_kill", len(ctrs))
	restartAt := time.Now()
	n.Restart()
	// From the restart on, a pod with two live sandboxes or containers was started twice.
	watchCtx, stopWatch := context.WithCancel(ctx)
	doubles := watchRuntimeDoubles(watchCtx, f.CRI)
	var doubled []string
	joinDoubles := func() []string {
		if doubles != nil {
			stopWatch()
			doubled, doubles = <-doubles, nil
		}
		return doubled
	}
	defer joinDoubles() // also when the test fails early
	if errs := <-created; len(errs) > 0 {
		t.Fatalf("creating %d pods: %d failed, first: %v", count, len(errs), errs[0])
	}
	pods := waitAllReady(t, ctx, cs, ns, count, 5*time.Minute)
	figure(t, "all_ready_after_restart", time.Since(restartAt))
	figure(t, "all_ready_after_first_create", time.Since(start))
	if s := summarize(pods); s.restarts != 0 {
		t.Errorf("%d container restarts across the %d pods, want 0", s.restarts, count)
	}

	first, err := runtimeCheck(ctx, f.CRI, pods)
	if err != nil {
		t.Fatal(err)
	}
	figure(t, "runtime_problems_at_all_ready", len(first.problems))
	for _, p := range first.problems {
		t.Logf("at all Ready: %s", p)
	}
	last := first
	waited := time.Now()
	err = framework.WaitFor(ctx, gcWait, "exactly one sandbox and one container per pod in containerd", func(ctx context.Context) (bool, error) {
		v, err := runtimeCheck(ctx, f.CRI, pods)
		if err != nil {
			return false, err
		}
		last = v
		return len(v.problems) == 0, nil
	})
	if err != nil {
		t.Errorf("%v; left:\n  %s", err, strings.Join(last.problems, "\n  "))
	} else {
		figure(t, "runtime_clean_after_all_ready", time.Since(waited))
	}
	reportLeakedTasks(t, last.leaked)
	d := joinDoubles()
	figure(t, "pods_started_twice", len(d))
	figure(t, "cut_starts_replaced", cutStartsReplaced(n))
	for _, p := range d {
		t.Errorf("started twice: %s", p)
	}
	figure(t, "loadavg", loadavg())
}

// watchRuntimeDoubles polls containerd until ctx ends and then sends the pods (by uid) seen
// with two READY sandboxes or two running containers of the same name at once (running by
// CRI, or by containerd's task behind a container CRI reports otherwise).
func watchRuntimeDoubles(ctx context.Context, c *framework.CRIClient) <-chan []string {
	out := make(chan []string, 1)
	go func() {
		seen := map[string]string{}
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for {
			if sbs, err := c.PodSandboxes(ctx, nil); err == nil {
				live := map[string][]string{}
				for _, sb := range sbs {
					if sb.State == runtimeapi.PodSandboxState_SANDBOX_READY {
						uid := sb.GetMetadata().GetUid()
						live[uid] = append(live[uid], short(sb.Id))
					}
				}
				for uid, ids := range live {
					if len(ids) > 1 && seen[uid] == "" {
						seen[uid] = fmt.Sprintf("pod uid %s: ready sandboxes %s", uid, strings.Join(ids, ", "))
					}
				}
			}
			tasks, _ := c.Tasks(ctx) // nil on error: CRI's view alone
			if ctrs, err := c.Containers(ctx, nil); err == nil {
				live := map[string][]string{}
				for _, ctr := range ctrs {
					// A task running behind a container CRI reports otherwise runs too.
					if ctr.State == runtimeapi.ContainerState_CONTAINER_RUNNING || tasks[ctr.Id] == "RUNNING" {
						k := ctr.Labels[framework.LabelPodUID] + "/" + ctr.GetMetadata().GetName()
						live[k] = append(live[k], short(ctr.Id))
					}
				}
				for k, ids := range live {
					if len(ids) > 1 && seen[k] == "" {
						seen[k] = fmt.Sprintf("pod uid/container %s: running containers %s", k, strings.Join(ids, ", "))
					}
				}
			}
			select {
			case <-ctx.Done():
				var res []string
				for _, v := range seen {
					res = append(res, v)
				}
				sort.Strings(res)
				out <- res
				return
			case <-tick.C:
			}
		}
	}()
	return out
}

// readyObservation is what a watch of the namespace's pods saw between two instants.
type readyObservation struct {
	mu sync.Mutex
	// ready is each pod's last seen Ready status.
	ready map[string]bool
	// modified counts MODIFIED events (status writes, as far as the watcher can tell).
	modified int
	// transitions lists every change of a pod's Ready status seen, "name True->False at +d".
	transitions []string
	// lastReadyAgain is when the last pod that went not Ready was seen Ready again.
	lastReadyAgain time.Time
	notReady       map[string]bool
	since          time.Time
}

func observeReady(t *testing.T, ctx context.Context, cs kubernetes.Interface, ns string) (*readyObservation, func()) {
	t.Helper()
	list, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("listing pods in %s: %v", ns, err)
	}
	o := &readyObservation{ready: map[string]bool{}, notReady: map[string]bool{}, since: time.Now()}
	for i := range list.Items {
		p := &list.Items[i]
		o.ready[p.Name] = framework.IsPodReady(p)
		if !o.ready[p.Name] {
			o.notReady[p.Name] = true
		}
	}
	w, err := cs.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		t.Fatalf("watching pods in %s: %v", ns, err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*v1.Pod)
			if !ok || ev.Type != watch.Modified {
				continue
			}
			now := time.Now()
			r := framework.IsPodReady(p)
			o.mu.Lock()
			o.modified++
			if prev, ok := o.ready[p.Name]; ok && prev != r {
				o.transitions = append(o.transitions, fmt.Sprintf("%s %v->%v at +%v", p.Name, prev, r, now.Sub(o.since).Round(10*time.Millisecond)))
			}
			o.ready[p.Name] = r
			if !r {
				o.notReady[p.Name] = true
			} else if o.notReady[p.Name] {
				delete(o.notReady, p.Name)
				o.lastReadyAgain = now
			}
			o.mu.Unlock()
		}
	}()
	return o, func() { w.Stop(); <-done }
}

// webPod serves TCP on 8080 (busybox httpd as PID 1) with a tcpSocket readiness probe, so
// that Ready depends on the prober and not only on the container running: a restart that
// forgets readiness shows.
func webPod(f *framework.Framework, ns, name string) *v1.Pod {
	p := sleepPod(f, ns, name)
	p.Spec.Containers[0].Command = []string{"httpd", "-f", "-p", "8080", "-h", "/"}
	p.Spec.Containers[0].ReadinessProbe = &v1.Probe{
		ProbeHandler:  v1.ProbeHandler{TCPSocket: &v1.TCPSocketAction{Port: intstr.FromInt32(8080)}},
		PeriodSeconds: 5, FailureThreshold: 1,
	}
	return p
}

// TestNodeletRestartWithFullNode runs -chaos.pods pods (maxPods 110) with readiness probes,
// stops nodelet with SIGTERM and starts it again: no container restarts (same container
// IDs, restartCount 0), every pod Ready again within 10 s of the start — in the API and in
// the node agent's own /pods — and no Ready flapping: a watch of the pods from before the
// stop until 30 s after the start must see no Ready transition.
func TestNodeletRestartWithFullNode(t *testing.T) {
	f := framework.New(t)
	ctx := context.Background()
	ns := f.NewNamespace()
	count := *fullPods
	n := startNode(t, f, count, nil)
	cs := fastClient(t, f)

	start := time.Now()
	createPods(t, ctx, cs, podNames("full", count), func(name string) *v1.Pod { return webPod(f, ns, name) })
	pods := waitAllReady(t, ctx, cs, ns, count, 5*time.Minute)
	figure(t, "pods", count)
	figure(t, "all_ready_after_create", time.Since(start))
	before := containerIDs(t, ctx, f.CRI, pods)

	obs, stopObs := observeReady(t, ctx, cs, ns)
	stopAt := time.Now()
	if err := n.Stop(); err != nil {
		t.Errorf("nodelet's exit on SIGTERM: %v, want exit status 0", err)
	}
	figure(t, "stop_took", time.Since(stopAt))
	restartAt := time.Now()
	n.Restart()
	f.WaitForNodeReady(ctx, time.Minute)
	figure(t, "node_ready_after_restart", time.Since(restartAt))

	// The node agent's own view: its /pods carries the status it computed.
	var agentNotReady []string
	err := framework.WaitFor(ctx, time.Minute, fmt.Sprintf("the node agent's /pods to list %d Ready pods", count), func(ctx context.Context) (bool, error) {
		nr, err := agentPodsNotReady(ctx, f, ns, count)
		agentNotReady = nr
		return err == nil && len(nr) == 0, err
	})
	agentReady := time.Since(restartAt)
	if err != nil {
		t.Errorf("%v; not Ready: %s", err, firstN(agentNotReady, 20))
	}
	figure(t, "agent_pods_ready_after_restart", agentReady)

	// Watch on until 30 s after the start: a probe reset shows within a period (5 s) plus
	// the start's jitter, a status resync within the status manager's period (10 s).
	time.Sleep(time.Until(restartAt.Add(30 * time.Second)))
	stopObs()
	obs.mu.Lock()
	transitions, modified, stillNot, lastAgain := obs.transitions, obs.modified, len(obs.notReady), obs.lastReadyAgain
	obs.mu.Unlock()
	figure(t, "pod_modified_events", modified)
	figure(t, "ready_transitions", len(transitions))
	for _, tr := range transitions {
		t.Logf("Ready transition: %s", tr)
	}
	if len(transitions) > 0 {
		t.Errorf("%d Ready transitions across the restart, want 0 (first: %s)", len(transitions), transitions[0])
	}
	apiReady := time.Duration(0)
	if !lastAgain.IsZero() {
		apiReady = lastAgain.Sub(restartAt)
	}
	figure(t, "api_pods_ready_again_after_restart", apiReady)
	if stillNot > 0 {
		t.Errorf("%d pods not Ready 30 s after the restart", stillNot)
	}
	if readyAgain := max(apiReady, agentReady); readyAgain > 10*time.Second {
		t.Errorf("pods Ready again %v after the restart (API %v, node agent %v), want within 10s", readyAgain.Round(10*time.Millisecond), apiReady.Round(10*time.Millisecond), agentReady.Round(10*time.Millisecond))
	}

	after, err := listPods(ctx, cs, ns)
	if err != nil {
		t.Fatal(err)
	}
	s := summarize(after)
	figure(t, "restarts", s.restarts)
	if s.restarts != 0 {
		t.Errorf("%d container restarts, want 0", s.restarts)
	}
	now := containerIDs(t, ctx, f.CRI, after)
	var changed []string
	for name, id := range before {
		if now[name] != id {
			changed = append(changed, fmt.Sprintf("%s: %s -> %s", name, short(id), short(now[name])))
		}
	}
	sort.Strings(changed)
	figure(t, "containers_replaced", len(changed))
	if len(changed) > 0 {
		t.Errorf("%d pods' containers replaced across the restart: %s", len(changed), firstN(changed, 10))
	}
	figure(t, "loadavg", loadavg())
}

// containerIDs maps each pod's name to the ID of its one running container in containerd.
func containerIDs(t *testing.T, ctx context.Context, c *framework.CRIClient, pods []v1.Pod) map[string]string {
	t.Helper()
	ctrs, err := c.Containers(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	byUID := map[string][]string{}
	for _, ctr := range ctrs {
		if ctr.State == runtimeapi.ContainerState_CONTAINER_RUNNING {
			uid := ctr.Labels[framework.LabelPodUID]
			byUID[uid] = append(byUID[uid], ctr.Id)
		}
	}
	out := map[string]string{}
	for _, p := range pods {
		ids := byUID[string(p.UID)]
		if len(ids) != 1 {
			t.Errorf("pod %s has %d running containers in containerd, want 1", p.Name, len(ids))
			continue
		}
		out[p.Name] = ids[0]
	}
	return out
}

// agentPodsNotReady reads the node agent's /pods (through the API server's node proxy) and
// returns the pods of ns it does not report Running and Ready; fewer than count pods is an
// error.
func agentPodsNotReady(ctx context.Context, f *framework.Framework, ns string, count int) ([]string, error) {
	b, err := f.Client.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes", f.Env.NodeName, "proxy", "pods").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading /pods of node %s: %w", f.Env.NodeName, err)
	}
	var l v1.PodList
	if err := json.Unmarshal(b, &l); err != nil {
		return nil, fmt.Errorf("decoding /pods: %w", err)
	}
	var mine []v1.Pod
	for _, p := range l.Items {
		if p.Namespace == ns {
			mine = append(mine, p)
		}
	}
	s := summarize(mine)
	if s.total != count {
		return s.notReady, fmt.Errorf("/pods lists %d pods of %s, want %d", s.total, ns, count)
	}
	return s.notReady, nil
}
