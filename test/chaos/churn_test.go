//go:build chaos

package chaos

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/test/e2e/framework"
)

// churnGrace is the churn's delete grace period: not 0, so that the node agent kills the
// pod and sends the final delete itself (busybox sleep as PID 1 ignores SIGTERM: SIGKILL
// after 1 s), the path every ordinary deletion takes.
const churnGrace = 1

// churnTolerance is how far above its baseline a resource figure may end (the 10 %).
const churnTolerance = 0.10

// TestChurn runs -chaos.churn pod create/delete cycles in batches of -chaos.churn-batch
// (each pod with a memory emptyDir and the service account token: two mounts), after one
// warm-up batch whose end is the baseline. At the end nodelet's goroutines (go_goroutines,
// when /metrics has it), open fds and RSS must return to within 10 % of the baseline, and
// nothing of the churned pods may be left: no sandbox or container in containerd, no log
// dir, no pod dir, no cgroup in any hierarchy under cgroupRoot, no mount under the pods dir.
// Leftovers may take one container GC period to go (upstream removes dead sandboxes and
// log dirs there); each one still there after it is listed.
func TestChurn(t *testing.T) {
	f := framework.New(t)
	ctx := context.Background()
	ns := f.NewNamespace()
	batch, total := max(1, *churnBatch), *churnPods
	n := startNode(t, f, batch, nil)
	cs := fastClient(t, f)
	var uidsMu sync.Mutex
	uids := map[string]bool{}
	round := 0
	churn := func() time.Duration {
		t.Helper()
		round++
		start := time.Now()
		names := podNames(fmt.Sprintf("churn-%03d", round), batch)
		errs := concurrently(names, func(name string) error {
			p, err := cs.CoreV1().Pods(ns).Create(ctx, churnPod(f, ns, name), metav1.CreateOptions{})
			if err == nil {
				uidsMu.Lock()
				uids[string(p.UID)] = true
				uidsMu.Unlock()
			}
			return err
		})
		if len(errs) > 0 {
			t.Fatalf("round %d: creating %d pods: %d failed, first: %v", round, batch, len(errs), errs[0])
		}
		waitAllReady(t, ctx, cs, ns, batch, 3*time.Minute)
		errs = concurrently(names, func(name string) error {
			return cs.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](churnGrace)})
		})
		if len(errs) > 0 {
			t.Fatalf("round %d: deleting %d pods: %d failed, first: %v", round, batch, len(errs), errs[0])
		}
		waitAllGone(t, ctx, cs, ns, 3*time.Minute)
		return time.Since(start)
	}

	figure(t, "warmup_round", churn())
	time.Sleep(10 * time.Second) // the warm-up's trailing work (status writes, kills) done
	base := sampleResources(t, ctx, f, n.Pid())
	figure(t, "baseline", base)

	start := time.Now()
	cycles := 0
	for cycles < total {
		d := churn()
		cycles += batch
		t.Logf("churn: %d/%d cycles, round took %v", cycles, total, d.Round(10*time.Millisecond))
	}
	figure(t, "cycles", cycles)
	figure(t, "churn_took", time.Since(start))

	var left []string
	waited := time.Now()
	err := framework.WaitFor(ctx, gcWait+15*time.Second, "nothing of the churned pods left on the node", func(ctx context.Context) (bool, error) {
		uidsMu.Lock()
		defer uidsMu.Unlock()
		l, err := churnLeftovers(ctx, f, n, uids)
		if err != nil {
			return false, err // (nothing listed is not nothing left)
		}
		left = l
		return len(l) == 0, nil
	})
	figure(t, "leftovers", len(left))
	if err != nil {
		t.Errorf("%v; %d left:\n  %s", err, len(left), strings.Join(left, "\n  "))
	} else {
		figure(t, "clean_after", time.Since(waited))
	}

	// Resources come back after the work's tail (GC of freed memory, which the Go runtime
	// returns to the kernel over minutes; idle connections closing): sampled until within
	// bounds or 3 minutes.
	var end resources
	var over []string
	settled := time.Now()
	_ = framework.WaitFor(ctx, 3*time.Minute, "resources back within 10 % of the baseline", func(ctx context.Context) (bool, error) {
		end = sampleResources(t, ctx, f, n.Pid())
		over = end.over(base, churnTolerance)
		return len(over) == 0, nil
	})
	figure(t, "end", end)
	figure(t, "end_settled_after", time.Since(settled))
	for _, o := range over {
		t.Errorf("after %d churn cycles %s (more than %.0f %% above the baseline)", cycles, o, churnTolerance*100)
	}
	if len(over) > 0 {
		t.Logf("fds more than at the baseline: %s; Go heap in use %.1f MiB at the baseline, %.1f MiB at the end",
			end.fdDiff(base), float64(base.heapInuse)/(1<<20), float64(end.heapInuse)/(1<<20))
	}
	figure(t, "loadavg", loadavg())
}

// churnPod is sleepPod with two mounts the node agent makes and must unmake: a memory
// emptyDir and the projected service account token.
func churnPod(f *framework.Framework, ns, name string) *v1.Pod {
	p := sleepPod(f, ns, name)
	p.Spec.AutomountServiceAccountToken = nil
	p.Spec.Volumes = []v1.Volume{{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{Medium: v1.StorageMediumMemory}}}}
	p.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "scratch", MountPath: "/scratch"}}
	return p
}

// resources are nodelet's figures the churn must not grow. goroutines is -1 when /metrics
// has no go_goroutines (then threads is the nearest thing, reported but not judged: the Go
// runtime keeps threads it once needed).
type resources struct {
	goroutines int
	fds        int
	rss        int64
	threads    int
	// heapInuse is go_memstats_heap_inuse_bytes (-1 when not exposed): what the Go heap
	// holds, to tell a leak from freed memory the runtime has not returned yet (RSS).
	heapInuse int64
	// fdKinds counts the open fds by what they point at (socket, pipe, anon_inode:[...],
	// or the file's path), to name what an fd growth is.
	fdKinds map[string]int
}

// fdDiff names the kinds of fds r has more of than base, "socket +2".
func (r resources) fdDiff(base resources) string {
	var out []string
	for k, n := range r.fdKinds {
		if d := n - base.fdKinds[k]; d > 0 {
			out = append(out, fmt.Sprintf("%s +%d", k, d))
		}
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}

func (r resources) String() string {
	return fmt.Sprintf("goroutines:%d,fds:%d,rss_mib:%.1f,heap_inuse_mib:%.1f,threads:%d", r.goroutines, r.fds, float64(r.rss)/(1<<20), float64(r.heapInuse)/(1<<20), r.threads)
}

// over lists the figures more than tol above base's.
func (r resources) over(base resources, tol float64) []string {
	var out []string
	check := func(name string, v, b float64) {
		if v > b*(1+tol) {
			out = append(out, fmt.Sprintf("%s %.0f, baseline %.0f (+%.1f %%)", name, v, b, (v/b-1)*100))
		}
	}
	if r.goroutines >= 0 && base.goroutines >= 0 {
		check("goroutines", float64(r.goroutines), float64(base.goroutines))
	}
	check("open fds", float64(r.fds), float64(base.fds))
	check("RSS bytes", float64(r.rss), float64(base.rss))
	return out
}

// sampleResources reads go_goroutines from nodelet's /metrics (when exposed) and fds, RSS
// and threads from /proc (process_open_fds and process_resident_memory_bytes are the same
// figures; /proc does not depend on the collectors being registered).
func sampleResources(t *testing.T, ctx context.Context, f *framework.Framework, pid int) resources {
	t.Helper()
	pf, err := readProc(pid)
	if err != nil {
		t.Fatal(err)
	}
	r := resources{goroutines: -1, heapInuse: -1, fds: pf.fds, rss: pf.rss, threads: pf.threads, fdKinds: fdKinds(pid)}
	m, err := nodeMetrics(ctx, f)
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := metricValue(m, "go_goroutines"); ok {
		r.goroutines = int(v)
	}
	if v, ok := metricValue(m, "go_memstats_heap_inuse_bytes"); ok {
		r.heapInuse = int64(v)
	}
	return r
}

// fdKinds counts a process's open fds by target: "socket", "pipe", "anon_inode:[eventpoll]",
// or the path (best effort: an fd closed while listing is skipped).
func fdKinds(pid int) map[string]int {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, _ := os.ReadDir(dir)
	kinds := map[string]int{}
	for _, e := range ents {
		target, err := os.Readlink(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		if k, _, ok := strings.Cut(target, ":["); ok && (k == "socket" || k == "pipe") {
			target = k
		}
		kinds[target]++
	}
	return kinds
}

// churnLeftovers lists what is left on the node of the pods with these uids (the test's
// pods are all deleted by then, and StartNodelet began on an empty runtime): sandboxes and
// containers in containerd, log dirs, pod dirs, mounts under the pods dir, and pod cgroups
// in every mounted hierarchy under cgroupRoot.
func churnLeftovers(ctx context.Context, f *framework.Framework, n *framework.Nodelet, uids map[string]bool) ([]string, error) {
	var left []string
	sbs, err := f.CRI.PodSandboxes(ctx, nil)
	if err != nil {
		return nil, err
	}
	for _, sb := range sbs {
		left = append(left, fmt.Sprintf("sandbox %s (%s/%s uid %s, %s)", short(sb.Id), sb.GetMetadata().GetNamespace(), sb.GetMetadata().GetName(), sb.GetMetadata().GetUid(), sb.State))
	}
	ctrs, err := f.CRI.Containers(ctx, nil)
	if err != nil {
		return nil, err
	}
	for _, c := range ctrs {
		left = append(left, fmt.Sprintf("container %s (%s of uid %s, %s)", short(c.Id), c.GetMetadata().GetName(), c.Labels[framework.LabelPodUID], c.State))
	}
	for _, dir := range []string{n.PodLogsDir, filepath.Join(n.RootDir, "pods")} {
		ents, err := os.ReadDir(dir)
		if err != nil && !os.IsNotExist(err) {
			return nil, fmt.Errorf("listing %s: %w", dir, err)
		}
		for _, e := range ents {
			left = append(left, "dir "+filepath.Join(dir, e.Name()))
		}
	}
	mounts, err := mountsUnder(filepath.Join(n.RootDir, "pods"))
	if err != nil {
		return nil, err
	}
	for _, m := range mounts {
		left = append(left, "mount "+m)
	}
	cg, err := podCgroups(f.Env.CgroupRoot, uids)
	if err != nil {
		return nil, err
	}
	left = append(left, cg...)
	sort.Strings(left)
	return left, nil
}

// podCgroups lists the cgroup directories, in every mounted hierarchy (each v1 controller,
// name=systemd, the unified one), under cgroupRoot whose name carries one of the uids:
// "pod<uid>" (cgroupfs driver) or "...-pod<uid with _>.slice" (systemd driver).
func podCgroups(cgroupRoot string, uids map[string]bool) ([]string, error) {
	roots, err := cgroupHierarchies()
	if err != nil {
		return nil, err
	}
	var left []string
	for _, h := range roots {
		top := filepath.Join(h, cgroupRoot)
		err := filepath.WalkDir(top, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				if os.IsNotExist(err) {
					return nil // this hierarchy has no cgroupRoot (or it went away mid-walk)
				}
				return err
			}
			if !d.IsDir() {
				return nil
			}
			name := d.Name()
			i := strings.LastIndex(name, "pod")
			if i < 0 {
				return nil
			}
			uid := strings.TrimSuffix(name[i+3:], ".slice")
			if uids[uid] || uids[strings.ReplaceAll(uid, "_", "-")] {
				left = append(left, "cgroup "+path)
				return fs.SkipDir // its containers' cgroups go with it
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("walking %s: %w", top, err)
		}
	}
	return left, nil
}
