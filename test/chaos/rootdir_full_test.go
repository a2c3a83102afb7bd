//go:build chaos

package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"

	"github.com/nodelet/nodelet/test/e2e/framework"
)

var (
	rootDirSize = flag.String("chaos.rootdir-size", "32m", "TestRootDirFull: size of the tmpfs that holds nodelet's root dir")
	rootDirFull = flag.Duration("chaos.rootdir-full-for", 20*time.Second, "TestRootDirFull: how long the root dir stays full")
	rootDirPods = flag.Int("chaos.rootdir-pods", 3, "TestRootDirFull: pods running when the root dir fills up")
)

// enospc is how Go (and so nodelet's logs) spells ENOSPC.
var enospc = syscall.ENOSPC.Error()

// TestRootDirFull runs nodelet with its root dir on a small tmpfs, with pods running, fills the
// tmpfs to ENOSPC and creates a pod (its configMap volume and its allocation checkpoint must
// be written under the root dir), then frees the space. The user checks that nodelet kept
// running and answering /healthz throughout, that its log says what it failed to write, that
// the pod created while the disk was full and a pod created afterwards both become Ready once
// space returns, and that no state file under the root dir was left truncated: every JSON
// file and checkpoint parses, no half-written temporary file is left, every configMap volume
// holds the whole configMap, and the allocation checkpoint names every pod.
//
// Disk-pressure eviction is off here (evictionHard holds only memory.available, so nodefs has
// no threshold: mergeDefaultEvictionSettings is false, as upstream's default): a full nodefs
// would otherwise evict the running pods, and this test is about the write path. The node's
// DiskPressure condition is checked to stay False, so that nothing else explains the figures.
func TestRootDirFull(t *testing.T) {
	f := framework.New(t)
	ctx := context.Background()
	ns := f.NewNamespace()

	if err := os.MkdirAll(f.Env.NodeletRootBase, 0o755); err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp(f.Env.NodeletRootBase, "rootdirfull-")
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(dir, "root")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", root, "tmpfs", 0, "size="+*rootDirSize+",mode=0755"); err != nil {
		t.Fatalf("mounting a %s tmpfs on %s: %v", *rootDirSize, root, err)
	}
	fill := filepath.Join(root, "chaos-fill")
	// Registered before the nodelet's own cleanup, so it runs after nodelet has stopped.
	t.Cleanup(func() {
		_ = os.Remove(fill)
		if t.Failed() {
			t.Logf("root dir (tmpfs, unmounted now) was %s:\n%s", root, listTree(root))
		}
		if err := syscall.Unmount(root, syscall.MNT_DETACH); err != nil {
			t.Logf("cleanup: unmounting %s: %v", root, err)
			return
		}
		_ = os.RemoveAll(dir)
	})

	n := f.StartNodelet(framework.NodeletOptions{
		Config: func(c *kubeletconfigv1beta1.KubeletConfiguration) {
			c.EvictionHard = map[string]string{"memory.available": "100Mi"}
			c.EvictionSoft = nil
		},
		ExtraArgs: []string{"--root-dir=" + root},
	})
	f.WaitForNodeReady(ctx, 2*time.Minute)
	cs := fastClient(t, f)
	t.Logf("CHAOS %s load=%s tmpfs=%s", t.Name(), loadavg(), *rootDirSize)

	// A configMap big enough that its files cannot squeeze into what is left of a full tmpfs.
	payload := map[string]string{}
	for i := range 4 {
		payload[fmt.Sprintf("key-%d", i)] = strings.Repeat(fmt.Sprintf("%d", i), 16<<10)
	}
	if _, err := f.Client.CoreV1().ConfigMaps(ns).Create(ctx, &v1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "payload"}, Data: payload,
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	mk := func(name string) *v1.Pod {
		p := sleepPod(f, ns, name)
		p.Spec.Volumes = []v1.Volume{{Name: "cfg", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{
			LocalObjectReference: v1.LocalObjectReference{Name: "payload"}}}}}
		p.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "cfg", MountPath: "/cfg"}}
		return p
	}
	running := *rootDirPods
	createPods(t, ctx, cs, podNames("run", running), mk)
	waitAllReady(t, ctx, cs, ns, running, 2*time.Minute)

	hz := watchHealthz(n, 500*time.Millisecond, 2*time.Second)
	defer hz.end()
	diskPressure := watchDiskPressure(ctx, f)
	defer diskPressure.end()

	// Fill the tmpfs to ENOSPC.
	logMark := len(n.Logs())
	filled, err := fillFS(fill)
	if err != nil {
		t.Fatalf("filling %s: %v", root, err)
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(root, &st); err != nil {
		t.Fatal(err)
	}
	figure(t, "filled_bytes", filled)
	figure(t, "free_bytes_when_full", st.Bavail*uint64(st.Bsize))
	fullAt := time.Now()

	// A pod created while the disk is full.
	f.CreatePod(ctx, mk("waiting"))
	readyWhileFull := false
	for time.Since(fullAt) < *rootDirFull {
		p, err := f.Client.CoreV1().Pods(ns).Get(ctx, "waiting", metav1.GetOptions{})
		if err == nil && framework.IsPodReady(p) {
			readyWhileFull = true
		}
		time.Sleep(time.Second)
	}
	figure(t, "waiting_pod_ready_while_full", readyWhileFull)

	// What nodelet said about the writes that failed.
	logs := n.Logs()[logMark:]
	var nospc []string
	for _, l := range strings.Split(logs, "\n") {
		if strings.Contains(l, enospc) {
			nospc = append(nospc, l)
		}
	}
	figure(t, "enospc_log_lines", len(nospc))
	for _, l := range nospc[:min(3, len(nospc))] {
		t.Logf("ENOSPC logged: %s", l)
	}
	if len(nospc) == 0 {
		t.Errorf("nodelet logged no %q while its root dir was full for %v and a pod with a configMap volume was created", enospc, *rootDirFull)
	}

	// Space returns.
	if err := os.Remove(fill); err != nil {
		t.Fatal(err)
	}
	freedAt := time.Now()
	f.WaitForPodReady(ctx, ns, "waiting", 2*time.Minute)
	figure(t, "waiting_pod_ready_after_space_back", time.Since(freedAt))
	start := time.Now()
	f.CreatePod(ctx, mk("after"))
	f.WaitForPodReady(ctx, ns, "after", 2*time.Minute)
	figure(t, "new_pod_ready_after", time.Since(start))
	pods := waitAllReady(t, ctx, cs, ns, running+2, time.Minute)

	hz.end()
	figure(t, "healthz_ok", hz.ok)
	figure(t, "healthz_failed", hz.bad+hz.errs)
	figure(t, "healthz_max_latency", hz.maxLatency)
	if hz.bad+hz.errs > 0 || hz.ok == 0 {
		t.Errorf("/healthz while the root dir was full: %d ok, %d failed, %d unanswered: %s", hz.ok, hz.bad, hz.errs, strings.Join(hz.samples, "; "))
	}
	diskPressure.end()
	if diskPressure.seen != "" {
		t.Errorf("the node reported DiskPressure (%s) though nodefs has no eviction threshold here", diskPressure.seen)
	}
	if !n.Running() {
		t.Fatalf("nodelet exited: %v", n.ExitError())
	}

	// No state file left truncated.
	problems := checkStateFiles(root, pods, payload)
	figure(t, "state_file_problems", len(problems))
	if len(problems) > 0 {
		t.Errorf("state under the root dir after the disk was full:\n%s", strings.Join(problems, "\n"))
	}
	t.Logf("CHAOS %s load=%s", t.Name(), loadavg())
}

// fillFS writes zeros to path until the filesystem is full (ENOSPC) and returns how many bytes
// it wrote.
func fillFS(path string) (int64, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var total int64
	for _, size := range []int{1 << 20, 4 << 10, 1} {
		buf := make([]byte, size)
		for {
			k, err := f.Write(buf)
			total += int64(k)
			if errors.Is(err, syscall.ENOSPC) {
				break
			}
			if err != nil {
				return total, err
			}
		}
	}
	return total, nil
}

// diskPressureWatch polls the Node for a DiskPressure condition that is not False.
type diskPressureWatch struct {
	stop, done chan struct{}
	seen       string // the first DiskPressure condition that was not False
}

func watchDiskPressure(ctx context.Context, f *framework.Framework) *diskPressureWatch {
	w := &diskPressureWatch{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for {
			if node, err := f.Client.CoreV1().Nodes().Get(ctx, f.Env.NodeName, metav1.GetOptions{}); err == nil {
				for _, c := range node.Status.Conditions {
					if c.Type == v1.NodeDiskPressure && c.Status != v1.ConditionFalse && w.seen == "" {
						w.seen = fmt.Sprintf("%s %s: %s", c.Status, c.Reason, c.Message)
					}
				}
			}
			select {
			case <-w.stop:
				return
			case <-time.After(time.Second):
			}
		}
	}()
	return w
}

func (w *diskPressureWatch) end() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
}

// checkStateFiles walks nodelet's root dir after the disk was full and lists what a restart
// would trip over: a JSON file or checkpoint that is empty or does not parse, a temporary
// file of an interrupted atomic write, a pod's configMap volume that does not hold the whole
// configMap, a pod the allocation checkpoint does not name.
func checkStateFiles(root string, pods []v1.Pod, payload map[string]string) []string {
	var problems []string
	checkpoints := map[string]bool{"allocated_pods_state": true, "actuated_pods_state": true, "graceful_node_shutdown_state": true}
	walkErr := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			problems = append(problems, fmt.Sprintf("walking %s: %v", path, err))
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		name := d.Name()
		if d.IsDir() {
			// Payload volumes are checked against the configMap below.
			if strings.Contains(rel, "volumes/kubernetes.io~configmap/") {
				return fs.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		if strings.HasPrefix(name, ".") && strings.Contains(name, ".tmp-") {
			problems = append(problems, "temporary file of an interrupted write left: "+rel)
			return nil
		}
		isState := strings.HasSuffix(name, ".json") || checkpoints[name] || name == "userns" ||
			strings.HasPrefix(rel, "image_manager/")
		if !isState {
			return nil
		}
		b, err := os.ReadFile(path)
		switch {
		case err != nil:
			problems = append(problems, fmt.Sprintf("reading %s: %v", rel, err))
		case len(b) == 0:
			problems = append(problems, "empty state file: "+rel)
		case !json.Valid(b):
			problems = append(problems, fmt.Sprintf("state file %s does not parse as JSON (%d bytes)", rel, len(b)))
		}
		return nil
	})
	if walkErr != nil {
		problems = append(problems, walkErr.Error())
	}

	var checkpoint struct{ Data string }
	if b, err := os.ReadFile(filepath.Join(root, "allocated_pods_state")); err != nil {
		problems = append(problems, fmt.Sprintf("reading the allocation checkpoint: %v", err))
	} else if err := json.Unmarshal(b, &checkpoint); err != nil || !json.Valid([]byte(checkpoint.Data)) {
		problems = append(problems, fmt.Sprintf("the allocation checkpoint does not parse: %v", err))
	}
	for _, p := range pods {
		if !strings.Contains(checkpoint.Data, string(p.UID)) {
			problems = append(problems, fmt.Sprintf("the allocation checkpoint does not name pod %s (%s)", p.Name, p.UID))
		}
		vol := filepath.Join(root, "pods", string(p.UID), "volumes", "kubernetes.io~configmap", "cfg")
		for k, want := range payload {
			got, err := os.ReadFile(filepath.Join(vol, k))
			switch {
			case err != nil:
				problems = append(problems, fmt.Sprintf("pod %s: configMap volume: %v", p.Name, err))
			case string(got) != want:
				problems = append(problems, fmt.Sprintf("pod %s: configMap volume file %s holds %d bytes, want %d", p.Name, k, len(got), len(want)))
			}
		}
	}
	return problems
}

// listTree lists the files under dir with their sizes, for failure output.
func listTree(dir string) string {
	var b strings.Builder
	_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		rel, _ := filepath.Rel(dir, path)
		fmt.Fprintf(&b, "  %s %d %s\n", info.Mode(), info.Size(), rel)
		return nil
	})
	return b.String()
}
