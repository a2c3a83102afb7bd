//go:build e2e

package e2e

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"

	"github.com/nodelet/nodelet/internal/mountutil"
	"github.com/nodelet/nodelet/test/e2e/framework"
)

// pressureWatch samples a node condition and remembers when it was first True and,
// after that, first False again.
type pressureWatch struct {
	cond         v1.NodeConditionType
	seen, gone   time.Time
	lastStatus   v1.ConditionStatus
	lastReason   string
	lastObserved time.Time
}

func (w *pressureWatch) sample(ctx context.Context, f *framework.Framework) {
	n, err := f.Client.CoreV1().Nodes().Get(ctx, f.Env.NodeName, metav1.GetOptions{})
	if err != nil {
		return
	}
	for _, c := range n.Status.Conditions {
		if c.Type != w.cond {
			continue
		}
		w.lastStatus, w.lastReason, w.lastObserved = c.Status, c.Reason, time.Now()
		switch {
		case c.Status == v1.ConditionTrue && w.seen.IsZero():
			w.seen = time.Now()
		case c.Status == v1.ConditionFalse && !w.seen.IsZero() && w.gone.IsZero():
			w.gone = time.Now()
		}
	}
}

// waitPressure polls until the condition has been True and then False.
func (w *pressureWatch) wait(ctx context.Context, t *testing.T, f *framework.Framework, timeout time.Duration, while func()) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		w.sample(ctx, f)
		if while != nil {
			while()
		}
		if !w.gone.IsZero() {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("node condition %s: seen True at %v, False again at %v (last %s/%s)", w.cond, w.seen, w.gone, w.lastStatus, w.lastReason)
}

func availableBytes(t *testing.T, path string) int64 {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		t.Fatalf("statfs %s: %v", path, err)
	}
	return int64(st.Bavail) * st.Bsize
}

func sleeperPod(f *framework.Framework, ns, name string) *v1.Pod {
	return f.BusyboxPod(ns, name, "sh", "-c", "sleep 3600")
}

func eventReasons(ctx context.Context, t *testing.T, f *framework.Framework, ns, pod string) []string {
	t.Helper()
	evs, err := f.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + pod})
	if err != nil {
		t.Fatalf("listing events of %s: %v", pod, err)
	}
	var out []string
	for _, e := range evs.Items {
		out = append(out, e.Reason)
	}
	return out
}

func evictedEvent(ctx context.Context, f *framework.Framework, ns, pod string) (*v1.Event, error) {
	evs, err := f.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + pod + ",reason=Evicted"})
	if err != nil || len(evs.Items) == 0 {
		return nil, err
	}
	return &evs.Items[0], nil
}

// checkEvicted asserts the upstream eviction status on pod: phase Failed, reason
// Evicted, a message naming the resource, a DisruptionTarget condition, an event.
func checkEvicted(ctx context.Context, t *testing.T, f *framework.Framework, p *v1.Pod, resourceName string) {
	t.Helper()
	if p.Status.Phase != v1.PodFailed || p.Status.Reason != "Evicted" || !strings.Contains(p.Status.Message, resourceName) {
		t.Errorf("evicted pod status = %s/%s %q, want Failed/Evicted naming %s", p.Status.Phase, p.Status.Reason, p.Status.Message, resourceName)
	}
	if !slices.ContainsFunc(p.Status.Conditions, func(c v1.PodCondition) bool {
		return c.Type == v1.DisruptionTarget && c.Status == v1.ConditionTrue && c.Reason == "TerminationByKubelet"
	}) {
		t.Errorf("evicted pod has no DisruptionTarget=True/TerminationByKubelet condition: %+v", p.Status.Conditions)
	}
	var ev *v1.Event
	_ = framework.WaitFor(ctx, 30*time.Second, "the Evicted event", func(ctx context.Context) (bool, error) {
		var err error
		ev, err = evictedEvent(ctx, f, p.Namespace, p.Name)
		return ev != nil, err
	})
	if ev == nil {
		t.Errorf("no Evicted event for %s (events: %v)", p.Name, eventReasons(ctx, t, f, p.Namespace, p.Name))
		return
	}
	// Beyond upstream: the event explains the decision (signal, ranking, why this pod).
	if !strings.Contains(ev.Message, "ranking") || ev.Annotations == nil {
		t.Errorf("Evicted event does not explain the decision: %q %v", ev.Message, ev.Annotations)
	}
	t.Logf("Evicted event: %s", ev.Message)
}

// checkRejected waits for a pod refused by admission under pressure.
func checkRejected(ctx context.Context, t *testing.T, f *framework.Framework, ns, name, condition string) {
	t.Helper()
	p := f.WaitForPod(ctx, ns, name, time.Minute, "rejected by admission", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodFailed })
	if p.Status.Reason != "Evicted" || !strings.Contains(p.Status.Message, condition) {
		t.Errorf("pod admitted under pressure is %s/%s %q, want Failed/Evicted naming %s", p.Status.Phase, p.Status.Reason, p.Status.Message, condition)
	}
}

// TestEvictionReclaimsUnusedImagesFirst puts nodefs (the rig's disk, which also holds the
// images) under a threshold just above its free space, with an unused image bigger than
// the gap: image GC must free enough, so no pod is evicted, and DiskPressure comes and goes.
func TestEvictionReclaimsUnusedImagesFirst(t *testing.T) {
	f := framework.New(t)
	ctx := context.Background()
	ns := f.NewNamespace()

	// An unused, incompressible 200 MiB image.
	dir := t.TempDir()
	blob := filepath.Join(dir, "filler")
	data := make([]byte, 200<<20)
	if _, err := rand.Read(data); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(blob, data, 0o755); err != nil {
		t.Fatal(err)
	}
	data = nil
	filler := fmt.Sprintf("nodelet.local/filler:%d", time.Now().Unix())
	tar := filepath.Join(dir, "filler.tar")
	run := func(name string, args ...string) {
		t.Helper()
		if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
			t.Fatalf("%s %v: %v\n%s", name, args, err, out)
		}
	}
	run(filepath.Join(f.Env.RigDir, "bin", "mkimage"), "-kind", "pause", "-bin", blob, "-name", filler, "-o", tar)
	run(f.Env.Ctr, "images", "import", tar)
	t.Cleanup(func() { _ = exec.Command(f.Env.Ctr, "images", "rm", filler).Run() })
	// containerd's CRI image store learns of an image ctr imported from its event stream,
	// a moment later: wait for it rather than read it once.
	var tags []string
	if err := framework.WaitFor(ctx, 30*time.Second, "the imported image in CRI's list", func(ctx context.Context) (bool, error) {
		tags, _ = f.CRI.ImageTags(ctx)
		return slices.Contains(tags, filler), nil
	}); err != nil {
		t.Fatalf("imported %s but the runtime lists %v: %v", filler, tags, err)
	}

	n := startNode(t, f, framework.NodeletOptions{Config: func(c *kubeletconfigv1beta1.KubeletConfiguration) {
		c.ImageMinimumGCAge = metav1.Duration{Duration: time.Second}
	}})
	f.CreatePod(ctx, sleeperPod(f, ns, "bystander"))
	by := f.WaitForPodReady(ctx, ns, "bystander", time.Minute)

	// Pressure until image GC frees about half of what the filler takes on disk.
	avail := availableBytes(t, n.RootDir)
	threshold := avail + 100<<20
	n.Config.EvictionHard = map[string]string{"nodefs.available": strconv.FormatInt(threshold, 10)}
	n.Config.EvictionPressureTransitionPeriod = metav1.Duration{Duration: 10 * time.Second}
	n.WriteConfig()
	t0 := time.Now()
	n.Restart()
	t.Logf("nodefs available %d MiB; threshold nodefs.available<%d MiB", avail>>20, threshold>>20)

	w := &pressureWatch{cond: v1.NodeDiskPressure}
	var fillerGone time.Time
	w.wait(ctx, t, f, 2*time.Minute, func() {
		if fillerGone.IsZero() {
			if tags, err := f.CRI.ImageTags(ctx); err == nil && !slices.Contains(tags, filler) {
				fillerGone = time.Now()
			}
		}
	})
	if fillerGone.IsZero() {
		t.Fatalf("DiskPressure came and went but the unused image %s is still there", filler)
	}
	t.Logf("timeline from restart: DiskPressure seen %.1fs, unused image removed %.1fs, DiskPressure cleared %.1fs; free space now %d MiB",
		w.seen.Sub(t0).Seconds(), fillerGone.Sub(t0).Seconds(), w.gone.Sub(t0).Seconds(), availableBytes(t, n.RootDir)>>20)

	tags, err := f.CRI.ImageTags(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, keep := range []string{f.Env.BusyboxImage, f.Env.PauseImage} {
		if !slices.Contains(tags, keep) {
			t.Errorf("image GC removed %s (in use, or the runtime's sandbox image); images left: %v", keep, tags)
		}
	}
	p, err := f.Client.CoreV1().Pods(ns).Get(ctx, "bystander", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Status.Phase != v1.PodRunning || p.Status.ContainerStatuses[0].RestartCount != 0 || p.Status.ContainerStatuses[0].ContainerID != by.Status.ContainerStatuses[0].ContainerID {
		t.Errorf("image reclaim was enough, yet the pod changed: %s", framework.DescribePod(p))
	}
	if !strings.Contains(n.Logs(), "node-level reclaim relieved pressure") {
		t.Errorf("nodelet log does not say node-level reclaim was enough")
	}
}

// mountTmpfs mounts a tmpfs of the given size for the test and removes it afterwards
// (registered before the nodelet starts, so it runs after the nodelet stopped).
func mountTmpfs(t *testing.T, f *framework.Framework, size string) string {
	t.Helper()
	dir, err := os.MkdirTemp(f.Env.NodeletRootBase, "tmpfs-")
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size="+size); err != nil {
		t.Fatalf("mounting a %s tmpfs on %s: %v", size, dir, err)
	}
	t.Cleanup(func() {
		if _, err := mountutil.UnmountAndRemoveAll(dir); err != nil {
			t.Logf("removing the tmpfs at %s: %v", dir, err)
		}
	})
	return dir
}

// TestEvictionDiskPressureEvictsTheWriter runs nodelet with its root dir (nodefs) on a
// 300 MiB tmpfs and a pod that writes 220 MiB into an emptyDir: that pod is evicted, a
// quiet pod with an ephemeral-storage request is not, pods are refused while the
// pressure lasts, and DiskPressure clears once the emptyDir is gone.
func TestEvictionDiskPressureEvictsTheWriter(t *testing.T) {
	f := framework.New(t)
	ctx := context.Background()
	ns := f.NewNamespace()
	root := mountTmpfs(t, f, "300m")
	n := startNode(t, f, framework.NodeletOptions{
		ExtraArgs: []string{"--root-dir=" + root},
		Config: func(c *kubeletconfigv1beta1.KubeletConfiguration) {
			c.EvictionHard = map[string]string{"nodefs.available": "100Mi"}
			c.EvictionPressureTransitionPeriod = metav1.Duration{Duration: 10 * time.Second}
			// The ranking reads the writer's emptyDir from the volume stats cache.
			c.VolumeStatsAggPeriod = metav1.Duration{Duration: 2 * time.Second}
		},
	})
	quiet := sleeperPod(f, ns, "quiet")
	quiet.Spec.Containers[0].Resources.Requests = v1.ResourceList{v1.ResourceEphemeralStorage: resource.MustParse("20Mi")}
	f.CreatePod(ctx, quiet)
	f.WaitForPodReady(ctx, ns, "quiet", time.Minute)

	writer := f.BusyboxPod(ns, "writer", "sh", "-c", "dd if=/dev/zero of=/data/fill bs=1M count=220 && sleep 3600")
	writer.Spec.Volumes = []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}}
	writer.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "data", MountPath: "/data"}}
	t0 := time.Now()
	f.CreatePod(ctx, writer)

	w := &pressureWatch{cond: v1.NodeDiskPressure}
	var evicted time.Time
	lateCreated := false
	w.wait(ctx, t, f, 3*time.Minute, func() {
		if !w.seen.IsZero() && !lateCreated {
			lateCreated = true
			f.CreatePod(ctx, sleeperPod(f, ns, "late"))
		}
		if evicted.IsZero() {
			if p, err := f.Client.CoreV1().Pods(ns).Get(ctx, "writer", metav1.GetOptions{}); err == nil && p.Status.Reason == "Evicted" {
				evicted = time.Now()
			}
		}
	})
	if evicted.IsZero() {
		t.Fatal("DiskPressure came and went but the writer was not evicted")
	}
	t.Logf("timeline from the writer's creation: DiskPressure seen %.1fs, writer evicted %.1fs, DiskPressure cleared %.1fs; nodefs free %d MiB",
		w.seen.Sub(t0).Seconds(), evicted.Sub(t0).Seconds(), w.gone.Sub(t0).Seconds(), availableBytes(t, root)>>20)

	p, err := f.Client.CoreV1().Pods(ns).Get(ctx, "writer", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	checkEvicted(ctx, t, f, p, "ephemeral-storage")
	checkRejected(ctx, t, f, ns, "late", "DiskPressure")
	q, err := f.Client.CoreV1().Pods(ns).Get(ctx, "quiet", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if q.Status.Phase != v1.PodRunning || q.Status.ContainerStatuses[0].RestartCount != 0 {
		t.Errorf("the quiet pod (within its ephemeral-storage request) was disturbed: %s", framework.DescribePod(q))
	}
	if !strings.Contains(n.Logs(), "Eviction manager: evicting pod") {
		t.Errorf("nodelet log has no eviction decision line")
	}
}

// TestEvictionMemoryPressureBestEffortFirst leaves the pods 700 MiB of allocatable memory
// (systemReserved takes the rest) with allocatableMemory.available<300Mi, and lets a
// BestEffort pod fill a 500 MiB memory-backed emptyDir: it is evicted, the Guaranteed pod
// stays, BestEffort pods are refused while MemoryPressure lasts and Burstable ones admitted.
func TestEvictionMemoryPressureBestEffortFirst(t *testing.T) {
	f := framework.New(t)
	ctx := context.Background()
	ns := f.NewNamespace()
	total := memTotal(t)
	reserved := total - 1000<<20
	startNode(t, f, framework.NodeletOptions{Config: func(c *kubeletconfigv1beta1.KubeletConfiguration) {
		c.SystemReserved = map[string]string{"memory": strconv.FormatInt(reserved, 10)}
		c.EvictionHard = map[string]string{"memory.available": "300Mi"}
		c.EnforceNodeAllocatable = []string{"pods"}
		c.EvictionPressureTransitionPeriod = metav1.Duration{Duration: 15 * time.Second}
	}})

	g := sleeperPod(f, ns, "guaranteed")
	lim := v1.ResourceList{v1.ResourceCPU: resource.MustParse("100m"), v1.ResourceMemory: resource.MustParse("64Mi")}
	g.Spec.Containers[0].Resources = v1.ResourceRequirements{Requests: lim, Limits: lim}
	f.CreatePod(ctx, g)
	gp := f.WaitForPodReady(ctx, ns, "guaranteed", time.Minute)
	if gp.Status.QOSClass != v1.PodQOSGuaranteed {
		t.Fatalf("guaranteed pod has QoS %s", gp.Status.QOSClass)
	}

	hog := f.BusyboxPod(ns, "hog", "sh", "-c", "dd if=/dev/zero of=/mem/fill bs=1M count=500 && sleep 3600")
	hog.Spec.Volumes = []v1.Volume{{Name: "mem", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{Medium: v1.StorageMediumMemory}}}}
	hog.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "mem", MountPath: "/mem"}}
	t0 := time.Now()
	f.CreatePod(ctx, hog)

	w := &pressureWatch{cond: v1.NodeMemoryPressure}
	var evicted time.Time
	late := false
	w.wait(ctx, t, f, 3*time.Minute, func() {
		if !w.seen.IsZero() && !late {
			late = true
			f.CreatePod(ctx, sleeperPod(f, ns, "late-besteffort"))
			bu := sleeperPod(f, ns, "late-burstable")
			bu.Spec.Containers[0].Resources.Requests = v1.ResourceList{v1.ResourceMemory: resource.MustParse("10Mi")}
			f.CreatePod(ctx, bu)
		}
		if evicted.IsZero() {
			if p, err := f.Client.CoreV1().Pods(ns).Get(ctx, "hog", metav1.GetOptions{}); err == nil && p.Status.Reason == "Evicted" {
				evicted = time.Now()
			}
		}
	})
	if evicted.IsZero() {
		t.Fatal("MemoryPressure came and went but the BestEffort hog was not evicted")
	}
	t.Logf("timeline from the hog's creation: MemoryPressure seen %.1fs, hog evicted %.1fs, MemoryPressure cleared %.1fs",
		w.seen.Sub(t0).Seconds(), evicted.Sub(t0).Seconds(), w.gone.Sub(t0).Seconds())

	p, err := f.Client.CoreV1().Pods(ns).Get(ctx, "hog", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	checkEvicted(ctx, t, f, p, "memory")
	checkRejected(ctx, t, f, ns, "late-besteffort", "MemoryPressure")
	f.WaitForPodReady(ctx, ns, "late-burstable", time.Minute)
	gp2, err := f.Client.CoreV1().Pods(ns).Get(ctx, "guaranteed", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if gp2.Status.Phase != v1.PodRunning || gp2.Status.ContainerStatuses[0].RestartCount != 0 {
		t.Errorf("the Guaranteed pod was disturbed: %s", framework.DescribePod(gp2))
	}
}

func memTotal(t *testing.T) int64 {
	t.Helper()
	data, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemTotal:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no MemTotal in /proc/meminfo")
	return 0
}

// TestEvictionLocalStorageLimits: with localStorageCapacityIsolation (the default) and no
// node pressure, a pod writing 30 MiB into an emptyDir with sizeLimit 10Mi, and a pod
// whose container writes 30 MiB into its writable layer past its 10Mi ephemeral-storage
// limit, are evicted with upstream's messages; a pod within its limits runs on. The
// writer's pod has a second, idle container with a large limit, so the pod's total stays
// within the sum of its containers' limits and the container check (which upstream runs
// after the pod total) is the one that fires. The rig keeps images on nodefs: with a
// dedicated imagefs the writable layer would not count for the container.
func TestEvictionLocalStorageLimits(t *testing.T) {
	f := framework.New(t)
	ctx := context.Background()
	ns := f.NewNamespace()
	// The emptyDir check reads the volume stats cache: refreshed every 2s here, not 1m.
	n := startNode(t, f, framework.NodeletOptions{Config: func(c *kubeletconfigv1beta1.KubeletConfiguration) {
		c.VolumeStatsAggPeriod = metav1.Duration{Duration: 2 * time.Second}
	}})

	limit := func(q string) v1.ResourceRequirements {
		return v1.ResourceRequirements{Limits: v1.ResourceList{v1.ResourceEphemeralStorage: resource.MustParse(q)}}
	}
	withEmptyDir := func(p *v1.Pod, sizeLimit string) *v1.Pod {
		q := resource.MustParse(sizeLimit)
		p.Spec.Volumes = []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{SizeLimit: &q}}}}
		p.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "data", MountPath: "/data"}}
		return p
	}
	fill := func(path string, mib int) string {
		return fmt.Sprintf("dd if=/dev/zero of=%s bs=1M count=%d && sync && sleep 3600", path, mib)
	}

	within := withEmptyDir(f.BusyboxPod(ns, "within", "sh", "-c", fill("/data/fill", 5)+" & "+fill("/fill", 5)), "50Mi")
	within.Spec.Containers[0].Resources = limit("50Mi")
	f.CreatePod(ctx, within)
	f.WaitForPodReady(ctx, ns, "within", time.Minute)

	overDir := withEmptyDir(f.BusyboxPod(ns, "emptydir-over", "sh", "-c", fill("/data/fill", 30)), "10Mi")
	overCtr := f.BusyboxPod(ns, "container-over", "sh", "-c", fill("/fill", 30))
	overCtr.Spec.Containers[0].Name = "writer"
	overCtr.Spec.Containers[0].Resources = limit("10Mi")
	idle := overCtr.Spec.Containers[0]
	idle.Name, idle.Command, idle.Resources = "idle", []string{"sleep", "3600"}, limit("100Mi")
	overCtr.Spec.Containers = append(overCtr.Spec.Containers, idle)
	t0 := time.Now()
	f.CreatePod(ctx, overDir)
	f.CreatePod(ctx, overCtr)

	// Usage is measured every eviction cycle (10s); containerd refreshes writable-layer
	// usage in the background on a similar period. Two minutes is several of both.
	for name, want := range map[string]string{
		"emptydir-over":  `Usage of EmptyDir volume "data" exceeds the limit "10Mi". `,
		"container-over": `Container writer exceeded its local ephemeral storage limit "10Mi". `,
	} {
		p := f.WaitForPod(ctx, ns, name, 2*time.Minute, "evicted", func(p *v1.Pod) bool { return p.Status.Reason == "Evicted" })
		t.Logf("%s evicted %.1fs after creation", name, time.Since(t0).Seconds())
		checkEvictedOverLimit(ctx, t, f, p, want)
	}

	w, err := f.Client.CoreV1().Pods(ns).Get(ctx, "within", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if w.Status.Phase != v1.PodRunning || w.Status.ContainerStatuses[0].RestartCount != 0 {
		t.Errorf("the pod within its limits was disturbed: %s", framework.DescribePod(w))
	}
	if logs := n.Logs(); !strings.Contains(logs, "evicting pod over its local storage limit") {
		t.Errorf("nodelet log has no local storage eviction line")
	}
	out := mustKubectl(t, ctx, f, "get", "--raw", "/api/v1/nodes/"+f.Env.NodeName+"/proxy/metrics")
	for _, m := range []string{`kubelet_evictions{eviction_signal="emptydirfs.limit"} 1`, `kubelet_evictions{eviction_signal="ephemeralcontainerfs.limit"} 1`} {
		if !strings.Contains(out, "\n"+m) {
			t.Errorf("/metrics has no %s:\n%s", m, grepLines(out, "kubelet_evictions"))
		}
	}
}

// checkEvictedOverLimit asserts upstream's status for a pod evicted over its own local
// storage limit: Failed/Evicted with exactly the message, and the same message as the
// Evicted event. Upstream adds no DisruptionTarget condition for these: the pod failed by
// its own doing, so a Job's pod failure policy must not treat it as a disruption.
func checkEvictedOverLimit(ctx context.Context, t *testing.T, f *framework.Framework, p *v1.Pod, message string) {
	t.Helper()
	if p.Status.Phase != v1.PodFailed || p.Status.Reason != "Evicted" || p.Status.Message != message {
		t.Errorf("%s status = %s/%s %q, want Failed/Evicted %q", p.Name, p.Status.Phase, p.Status.Reason, p.Status.Message, message)
	}
	if slices.ContainsFunc(p.Status.Conditions, func(c v1.PodCondition) bool { return c.Type == v1.DisruptionTarget }) {
		t.Errorf("%s has a DisruptionTarget condition; upstream sets none for local storage limits: %+v", p.Name, p.Status.Conditions)
	}
	var ev *v1.Event
	_ = framework.WaitFor(ctx, 30*time.Second, "the Evicted event of "+p.Name, func(ctx context.Context) (bool, error) {
		var err error
		ev, err = evictedEvent(ctx, f, p.Namespace, p.Name)
		return ev != nil, err
	})
	if ev == nil {
		t.Errorf("no Evicted event for %s (events: %v)", p.Name, eventReasons(ctx, t, f, p.Namespace, p.Name))
	} else if ev.Message != message || ev.Type != v1.EventTypeWarning {
		t.Errorf("%s Evicted event = %s %q, want Warning %q", p.Name, ev.Type, ev.Message, message)
	}
}
