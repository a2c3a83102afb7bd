//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/test/e2e/framework"
)

// rigTestHandler is the rig's second containerd runtime handler (test/rig/up.sh): runc >= 1.2,
// which has idmapped mounts.
const rigTestHandler = "runc-test"

// createRuntimeClass creates a cluster-scoped RuntimeClass named after the test and deletes it
// at cleanup.
func createRuntimeClass(t *testing.T, f *framework.Framework, suffix, handler string, overhead v1.ResourceList) string {
	t.Helper()
	ctx := context.Background()
	rc := &nodev1.RuntimeClass{
		ObjectMeta: metav1.ObjectMeta{GenerateName: strings.TrimPrefix(framework.NamespacePrefix(t.Name()), "e2e-") + suffix + "-"},
		Handler:    handler,
	}
	if overhead != nil {
		rc.Overhead = &nodev1.Overhead{PodFixed: overhead}
	}
	created, err := f.Client.NodeV1().RuntimeClasses().Create(ctx, rc, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating RuntimeClass: %v", err)
	}
	t.Cleanup(func() { deleteRuntimeClass(t, f, created.Name) })
	return created.Name
}

func deleteRuntimeClass(t *testing.T, f *framework.Framework, name string) {
	err := f.Client.NodeV1().RuntimeClasses().Delete(context.Background(), name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("deleting RuntimeClass %s: %v", name, err)
	}
}

// waitForPodEvent waits for an event of the pod with reason whose message contains substr,
// and returns its message.
func waitForPodEvent(t *testing.T, f *framework.Framework, ns, pod, reason, substr string) string {
	t.Helper()
	var msg string
	var seen []string
	err := framework.WaitFor(context.Background(), 2*time.Minute, fmt.Sprintf("a %s event of %s containing %q", reason, pod, substr), func(ctx context.Context) (bool, error) {
		evs, err := f.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + pod + ",reason=" + reason})
		if err != nil {
			return false, err
		}
		seen = seen[:0]
		for _, e := range evs.Items {
			seen = append(seen, e.Message)
			if strings.Contains(e.Message, substr) {
				msg = e.Message
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("%v; events seen: %q", err, seen)
	}
	return msg
}

// sandboxOf returns the CRI status of the pod's one ready sandbox.
func sandboxOf(t *testing.T, f *framework.Framework, uid string) *runtimeapi.PodSandboxStatus {
	t.Helper()
	ctx := context.Background()
	sbs, err := f.CRI.PodSandboxesOf(ctx, uid)
	if err != nil {
		t.Fatal(err)
	}
	for _, sb := range sbs {
		if sb.State != runtimeapi.PodSandboxState_SANDBOX_READY {
			continue
		}
		st, err := f.CRI.Runtime.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: sb.Id})
		if err != nil {
			t.Fatal(err)
		}
		return st.GetStatus()
	}
	t.Fatalf("pod %s has no ready sandbox (%d sandboxes)", uid, len(sbs))
	return nil
}

// TestRuntimeClassHandlerAndOverhead: a pod naming a RuntimeClass runs in a sandbox of that
// class's handler (PodSandboxStatus.runtimeHandler), and the overhead the API server's
// RuntimeClass admission copied into spec.overhead is added to the pod cgroup's limits
// (container limits + overhead), as upstream.
func TestRuntimeClassHandlerAndOverhead(t *testing.T) {
	f := framework.New(t)
	ctx := context.Background()
	ns := f.NewNamespace()
	startNode(t, f, framework.NodeletOptions{})
	q := resource.MustParse
	rc := createRuntimeClass(t, f, "test", rigTestHandler, v1.ResourceList{v1.ResourceMemory: q("32Mi"), v1.ResourceCPU: q("100m")})

	pod := f.BusyboxPod(ns, "classy", "sleep", "3600")
	pod.Spec.RuntimeClassName = ptr.To(rc)
	pod.Spec.Containers[0].Resources = v1.ResourceRequirements{
		Requests: v1.ResourceList{v1.ResourceCPU: q("200m"), v1.ResourceMemory: q("64Mi")},
		Limits:   v1.ResourceList{v1.ResourceCPU: q("200m"), v1.ResourceMemory: q("64Mi")},
	}
	created := f.CreatePod(ctx, pod)
	if got := created.Spec.Overhead; got.Memory().String() != "32Mi" || got.Cpu().String() != "100m" {
		t.Fatalf("spec.overhead = %v: the API server's RuntimeClass admission did not set it", got)
	}
	got := f.WaitForPodReady(ctx, ns, "classy", 2*time.Minute)

	sb := sandboxOf(t, f, string(got.UID))
	t.Logf("sandbox %s runtimeHandler=%q", sb.GetId(), sb.GetRuntimeHandler())
	if sb.GetRuntimeHandler() != rigTestHandler {
		t.Errorf("sandbox runtime handler = %q, want %q", sb.GetRuntimeHandler(), rigTestHandler)
	}
	plain := f.BusyboxPod(ns, "plain", "sleep", "3600")
	f.CreatePod(ctx, plain)
	plainUID := string(f.WaitForPodReady(ctx, ns, "plain", 2*time.Minute).UID)
	if h := sandboxOf(t, f, plainUID).GetRuntimeHandler(); h != "" && h != "runc" {
		t.Errorf("pod without a RuntimeClass: runtime handler %q, want the default", h)
	}

	// Guaranteed (overhead does not change the QoS class): kubepods/pod<uid>.
	dir := filepath.Join("kubepods", "pod"+string(got.UID))
	mem := readCgroup(t, filepath.Join("/sys/fs/cgroup/memory", f.Env.CgroupRoot, dir, "memory.limit_in_bytes"))
	quota := readCgroup(t, filepath.Join("/sys/fs/cgroup/cpu", f.Env.CgroupRoot, dir, "cpu.cfs_quota_us"))
	shares := readCgroup(t, filepath.Join("/sys/fs/cgroup/cpu", f.Env.CgroupRoot, dir, "cpu.shares"))
	t.Logf("pod cgroup %s: memory.limit_in_bytes=%s cpu.cfs_quota_us=%s cpu.shares=%s", dir, mem, quota, shares)
	if want := strconv.Itoa((64 + 32) << 20); mem != want {
		t.Errorf("pod memory limit = %s, want %s (64Mi limit + 32Mi overhead)", mem, want)
	}
	if quota != "30000" {
		t.Errorf("pod cpu quota = %s, want 30000 (200m limit + 100m overhead of a 100ms period)", quota)
	}
	if shares != "307" {
		t.Errorf("pod cpu.shares = %s, want 307 (200m request + 100m overhead)", shares)
	}
}

// TestRuntimeClassMissing: a pod whose RuntimeClass is gone (deleted after the API server
// admitted the pod: the admission refuses a pod naming a class that does not exist) gets
// upstream's FailedCreatePodSandBox event naming the class, has no sandbox and stays Pending;
// once the class exists again the retried sync runs it.
func TestRuntimeClassMissing(t *testing.T) {
	f := framework.New(t)
	ctx := context.Background()
	ns := f.NewNamespace()
	n := startNode(t, f, framework.NodeletOptions{})
	rc := createRuntimeClass(t, f, "gone", rigTestHandler, nil)

	// With nodelet stopped, nothing runs the pod before its class is gone.
	if err := n.Stop(); err != nil {
		t.Fatalf("stopping nodelet: %v", err)
	}
	pod := f.BusyboxPod(ns, "orphan-class", "sleep", "3600")
	pod.Spec.RuntimeClassName = ptr.To(rc)
	created := f.CreatePod(ctx, pod)
	deleteRuntimeClass(t, f, rc)
	n.Restart()

	msg := waitForPodEvent(t, f, ns, "orphan-class", "FailedCreatePodSandBox", fmt.Sprintf("%q not found", rc))
	t.Logf("event: %s", msg)
	if want := fmt.Sprintf("Failed to create pod sandbox: runtimeclass.node.k8s.io %q not found", rc); msg != want {
		t.Errorf("event message %q, want %q", msg, want)
	}
	// Retried (a second event) and still Pending, with no sandbox.
	err := framework.WaitFor(ctx, time.Minute, "a second FailedCreatePodSandBox (a retry)", func(ctx context.Context) (bool, error) {
		evs, err := f.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=orphan-class,reason=FailedCreatePodSandBox"})
		if err != nil || len(evs.Items) == 0 {
			return false, err
		}
		return evs.Items[0].Count >= 2 || len(evs.Items) >= 2, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	p, err := f.Client.CoreV1().Pods(ns).Get(ctx, "orphan-class", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("pod: %s", framework.DescribePod(p))
	if p.Status.Phase != v1.PodPending {
		t.Errorf("phase %s, want Pending", p.Status.Phase)
	}
	for _, cs := range p.Status.ContainerStatuses {
		if cs.State.Waiting == nil || cs.State.Waiting.Reason != "ContainerCreating" {
			t.Errorf("container %s: %+v, want waiting in ContainerCreating", cs.Name, cs.State)
		}
	}
	if sbs, err := f.CRI.PodSandboxesOf(ctx, string(created.UID)); err != nil || len(sbs) != 0 {
		t.Errorf("sandboxes of the pod: %v, %v; want none", sbs, err)
	}

	// The class back (same name): the next retry runs the pod with its handler.
	if _, err := f.Client.NodeV1().RuntimeClasses().Create(ctx, &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: rc}, Handler: rigTestHandler}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	running := f.WaitForPodReady(ctx, ns, "orphan-class", 2*time.Minute)
	if h := sandboxOf(t, f, string(running.UID)).GetRuntimeHandler(); h != rigTestHandler {
		t.Errorf("runtime handler %q, want %q", h, rigTestHandler)
	}
}

// TestUserNamespacePod: a hostUsers: false pod sees its uid 0 mapped to a non-zero host uid
// in a range of 65536 (/proc/self/uid_map), the mapping nodelet keeps in
// <root>/pods/<uid>/userns: the same after a nodelet restart, gone with the pod. Whether a
// handler can run it is what containerd reports in the node's status.runtimeHandlers (it
// needs a runc with idmapped mounts): the rig's default handler runs Debian's runc 1.1.5,
// which has none, and such a pod is refused with upstream's words; runc-test has them.
func TestUserNamespacePod(t *testing.T) {
	f := framework.New(t)
	ctx := context.Background()
	ns := f.NewNamespace()
	n := startNode(t, f, framework.NodeletOptions{})
	kernel, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	t.Logf("kernel %s (idmapped mounts: overlayfs since 5.19, tmpfs since 6.3)", strings.TrimSpace(string(kernel)))

	var node *v1.Node
	err := framework.WaitFor(ctx, time.Minute, "status.runtimeHandlers naming "+rigTestHandler, func(ctx context.Context) (bool, error) {
		var err error
		node, err = f.Client.CoreV1().Nodes().Get(ctx, f.Env.NodeName, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, h := range node.Status.RuntimeHandlers {
			if h.Name == rigTestHandler {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	supports := map[string]bool{}
	for _, h := range node.Status.RuntimeHandlers {
		supports[h.Name] = h.Features != nil && ptr.Deref(h.Features.UserNamespaces, false)
		t.Logf("runtime handler %q: userNamespaces=%v", h.Name, supports[h.Name])
	}
	if !supports[rigTestHandler] {
		t.Fatalf("containerd reports no user namespace support for %s (runc >= 1.2 with idmapped mounts): the rig cannot run the pod", rigTestHandler)
	}

	// The default handler, as the node reports it.
	refused := f.BusyboxPod(ns, "userns-default", "sleep", "3600")
	refused.Spec.HostUsers = ptr.To(false)
	refusedUID := string(f.CreatePod(ctx, refused).UID)
	if supports[""] {
		f.WaitForPodReady(ctx, ns, "userns-default", 2*time.Minute)
		t.Logf("the default handler supports user namespaces here: its pod runs")
	} else {
		msg := waitForPodEvent(t, f, ns, "userns-default", "FailedCreatePodSandBox", "hostUsers")
		t.Logf("default handler (no idmapped mounts in its runc): %s", msg)
		if want := "Failed to create pod sandbox: can't set `spec.hostUsers: false`, runtime does not support user namespaces"; msg != want {
			t.Errorf("event %q, want %q", msg, want)
		}
		if sbs, err := f.CRI.PodSandboxesOf(ctx, refusedUID); err != nil || len(sbs) != 0 {
			t.Errorf("sandboxes of the refused pod: %v, %v; want none", sbs, err)
		}
		if _, err := os.Stat(filepath.Join(n.RootDir, "pods", refusedUID, "userns")); !os.IsNotExist(err) {
			t.Errorf("the refused pod got a mapping file: %v", err)
		}
	}

	rc := createRuntimeClass(t, f, "userns", rigTestHandler, nil)
	pod := f.BusyboxPod(ns, "userns", "sh", "-c", "cat /proc/self/uid_map /proc/self/gid_map; id; sleep 3600")
	pod.Spec.HostUsers = ptr.To(false)
	pod.Spec.RuntimeClassName = ptr.To(rc)
	f.CreatePod(ctx, pod)
	got := f.WaitForPodReady(ctx, ns, "userns", 2*time.Minute)
	logs, err := f.Client.CoreV1().Pods(ns).GetLogs("userns", &v1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		t.Fatalf("logs: %v", err)
	}
	t.Logf("container output:\n%s", logs)
	lines := strings.Split(strings.TrimSpace(string(logs)), "\n")
	if len(lines) < 3 {
		t.Fatalf("output %q, want uid_map, gid_map and id", logs)
	}
	uidMap := strings.Fields(lines[0])
	if len(uidMap) != 3 || uidMap[0] != "0" || uidMap[1] == "0" || uidMap[2] != "65536" {
		t.Fatalf("uid_map %q, want container uid 0 → a non-zero host uid, 65536 long", lines[0])
	}
	if strings.Join(strings.Fields(lines[1]), " ") != strings.Join(uidMap, " ") {
		t.Errorf("gid_map %q, want the uid_map %q", lines[1], lines[0])
	}
	if !strings.HasPrefix(lines[2], "uid=0(root)") {
		t.Errorf("id = %q, want root inside the pod", lines[2])
	}
	hostID, _ := strconv.ParseUint(uidMap[1], 10, 32)
	if hostID%65536 != 0 {
		t.Errorf("host uid %d is not a multiple of 65536", hostID)
	}

	file := filepath.Join(n.RootDir, "pods", string(got.UID), "userns")
	kept := readMappingFile(t, file)
	if kept != hostID {
		t.Errorf("%s keeps host ID %d, the pod runs with %d", file, kept, hostID)
	}
	sb := sandboxOf(t, f, string(got.UID))
	if u := sb.GetLinux().GetNamespaces().GetOptions().GetUsernsOptions(); u.GetMode() != runtimeapi.NamespaceMode_POD || len(u.GetUids()) != 1 || uint64(u.GetUids()[0].GetHostId()) != hostID {
		t.Errorf("sandbox userns options %v, want mode POD from %d", u, hostID)
	}

	// A restart keeps the mapping: the pod is adopted and a new container of it (a second
	// pod would never get the same range) maps the same IDs.
	n.Restart()
	f.WaitForNodeReady(ctx, 2*time.Minute)
	if again := readMappingFile(t, file); again != hostID {
		t.Errorf("after the restart %s has %d, want %d", file, again, hostID)
	}
	second := f.BusyboxPod(ns, "userns-2", "sh", "-c", "cat /proc/self/uid_map; sleep 3600")
	second.Spec.HostUsers = ptr.To(false)
	second.Spec.RuntimeClassName = ptr.To(rc)
	f.CreatePod(ctx, second)
	f.WaitForPodReady(ctx, ns, "userns-2", 2*time.Minute)
	logs2, err := f.Client.CoreV1().Pods(ns).GetLogs("userns-2", &v1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if f2 := strings.Fields(string(logs2)); len(f2) != 3 || f2[0] != "0" || f2[1] == uidMap[1] || f2[1] == "0" {
		t.Errorf("second pod uid_map %q, want its own non-zero range (the first has %s)", logs2, uidMap[1])
	}

	// Deleting the pod releases the range: its file (and directory) go.
	f.DeletePod(ctx, ns, "userns", nil)
	f.WaitForPodGone(ctx, ns, "userns", 2*time.Minute)
	err = framework.WaitFor(ctx, time.Minute, "the pod directory with its userns file to be removed", func(context.Context) (bool, error) {
		_, err := os.Stat(filepath.Dir(file))
		return os.IsNotExist(err), nil
	})
	if err != nil {
		t.Error(err)
	}
}

func readMappingFile(t *testing.T, path string) uint64 {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading the pod's mapping: %v", err)
	}
	var m struct {
		UIDMappings []struct {
			HostID      uint64 `json:"hostId"`
			ContainerID uint64 `json:"containerId"`
			Length      uint64 `json:"length"`
		} `json:"uidMappings"`
	}
	if err := json.Unmarshal(data, &m); err != nil || len(m.UIDMappings) != 1 || m.UIDMappings[0].Length != 65536 || m.UIDMappings[0].ContainerID != 0 {
		t.Fatalf("%s = %s (%v), want one mapping of container ID 0, 65536 long", path, data, err)
	}
	return m.UIDMappings[0].HostID
}
