//go:build e2e

package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/internal/mountutil"
	"github.com/nodelet/nodelet/test/e2e/framework"
)

// Claims on the rig (issue 18, the part without CSI): the rig's
// kube-controller-manager runs the persistent-volume binder, the protection
// controllers and the ephemeral-volume controller. Each PersistentVolume is
// pre-bound to its claim by claimRef (namespace and name), so the binder
// binds exactly that pair whatever else exists; storageClassName "" keeps
// every class (and provisioning) out.

const pvcBound = 60 * time.Second

func pvFor(ns, claim, name string, src v1.PersistentVolumeSource) *v1.PersistentVolume {
	return &v1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1.PersistentVolumeSpec{
			Capacity:                      v1.ResourceList{v1.ResourceStorage: resource.MustParse("10Mi")},
			AccessModes:                   []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: v1.PersistentVolumeReclaimRetain,
			StorageClassName:              "",
			ClaimRef:                      &v1.ObjectReference{Namespace: ns, Name: claim},
			PersistentVolumeSource:        src,
		},
	}
}

// hostPathSource is a DirectoryOrCreate hostPath volume: nodelet creates the
// directory, as for hostPath volumes.
func hostPathSource(dir string) v1.PersistentVolumeSource {
	return v1.PersistentVolumeSource{HostPath: &v1.HostPathVolumeSource{Path: dir, Type: ptr.To(v1.HostPathDirectoryOrCreate)}}
}

func claimSpec() v1.PersistentVolumeClaimSpec {
	return v1.PersistentVolumeClaimSpec{
		AccessModes:      []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
		StorageClassName: ptr.To(""),
		Resources:        v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Mi")}},
	}
}

// createPV creates the volume and deletes it when the test ends (its data,
// reclaim policy Retain, stays where the test put it).
func createPV(ctx context.Context, t *testing.T, f *framework.Framework, pv *v1.PersistentVolume) {
	t.Helper()
	if _, err := f.Client.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating PersistentVolume %s: %v", pv.Name, err)
	}
	t.Cleanup(func() {
		_ = f.Client.CoreV1().PersistentVolumes().Delete(context.Background(), pv.Name, metav1.DeleteOptions{})
	})
}

func createClaim(ctx context.Context, t *testing.T, f *framework.Framework, ns, name string) {
	t.Helper()
	pvc := &v1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: claimSpec()}
	if _, err := f.Client.CoreV1().PersistentVolumeClaims(ns).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating PersistentVolumeClaim %s: %v", name, err)
	}
}

func waitClaimBound(ctx context.Context, t *testing.T, ns, name string, f *framework.Framework) {
	t.Helper()
	var phase v1.PersistentVolumeClaimPhase
	err := framework.WaitFor(ctx, pvcBound, "claim "+ns+"/"+name+" to be Bound", func(ctx context.Context) (bool, error) {
		pvc, err := f.Client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		phase = pvc.Status.Phase
		return phase == v1.ClaimBound, nil
	})
	if err != nil {
		t.Fatalf("%v (phase %q): is the binder running in the rig's kube-controller-manager?", err, phase)
	}
}

// onThisNode is a local volume's node affinity to the rig's node (its hostname label).
func onThisNode(ctx context.Context, t *testing.T, f *framework.Framework) *v1.VolumeNodeAffinity {
	t.Helper()
	node, err := f.Client.CoreV1().Nodes().Get(ctx, f.Env.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	hostname := node.Labels[v1.LabelHostname]
	if hostname == "" {
		t.Fatalf("node %s has no %s label", node.Name, v1.LabelHostname)
	}
	return &v1.VolumeNodeAffinity{Required: &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{
		MatchExpressions: []v1.NodeSelectorRequirement{{Key: v1.LabelHostname, Operator: v1.NodeSelectorOpIn, Values: []string{hostname}}},
	}}}}
}

// claimPod mounts volume at /data; command runs in busybox.
func claimPod(f *framework.Framework, ns, name string, vol v1.Volume, restart v1.RestartPolicy, command string) *v1.Pod {
	p := f.BusyboxPod(ns, name, "sh", "-c", command)
	p.Spec.RestartPolicy = restart
	p.Spec.Volumes = []v1.Volume{vol}
	p.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: vol.Name, MountPath: "/data"}}
	return p
}

func pvcVolume(claim string) v1.Volume {
	return v1.Volume{Name: "data", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}
}

// writeThenRead: a pod writes a token to the claim and is deleted; a new pod
// of the same name reads the token back (Succeeded only if it matches). mutate
// (optional) changes both pods; between (optional) runs while the writer runs.
func writeThenRead(ctx context.Context, t *testing.T, f *framework.Framework, ns string, vol v1.Volume, between, mutate func(*v1.Pod)) {
	t.Helper()
	const token = "written-by-the-first-pod"
	if mutate == nil {
		mutate = func(*v1.Pod) {}
	}
	wp := claimPod(f, ns, "user", vol, v1.RestartPolicyAlways,
		"echo "+token+" > /data/token && sync && trap 'exit 0' TERM && while true; do sleep 1; done")
	mutate(wp)
	w := f.CreatePod(ctx, wp)
	f.WaitForPodReady(ctx, ns, w.Name, 2*time.Minute)
	if between != nil {
		between(w)
	}
	f.DeletePod(ctx, ns, w.Name, ptr.To[int64](0))
	f.WaitForPodGone(ctx, ns, w.Name, time.Minute)

	rp := claimPod(f, ns, "user", vol, v1.RestartPolicyNever, `test "$(cat /data/token)" = `+token)
	mutate(rp)
	r := f.CreatePod(ctx, rp)
	got := f.WaitForPod(ctx, ns, r.Name, 2*time.Minute, "to finish", func(p *v1.Pod) bool {
		return p.Status.Phase == v1.PodSucceeded || p.Status.Phase == v1.PodFailed
	})
	if got.Status.Phase != v1.PodSucceeded {
		t.Fatalf("the re-created pod did not read the token back: %s", framework.DescribePod(got))
	}
}

// TestPVCHostPathVolume: a claim bound to a hostPath PersistentVolume
// (DirectoryOrCreate: nodelet creates the directory, as for hostPath volumes)
// keeps its data across the pod's deletion and re-creation.
func TestPVCHostPathVolume(t *testing.T) {
	f := framework.New(t)
	ctx := context.Background()
	ns := f.NewNamespace()
	startNode(t, f, framework.NodeletOptions{})
	dir := filepath.Join(t.TempDir(), "hostpath-pv")
	createPV(ctx, t, f, pvFor(ns, "hp", ns+"-hp", hostPathSource(dir)))
	createClaim(ctx, t, f, ns, "hp")
	waitClaimBound(ctx, t, ns, "hp", f)

	writeThenRead(ctx, t, f, ns, pvcVolume("hp"), func(*v1.Pod) {
		b, err := os.ReadFile(filepath.Join(dir, "token"))
		if err != nil || !strings.Contains(string(b), "written-by-the-first-pod") {
			t.Fatalf("the pod's write is not in the hostPath volume's directory: %q, %v", b, err)
		}
	}, nil)
}

// TestPVCLocalVolume: a claim bound to a local PersistentVolume with node
// affinity to the rig's node is bind-mounted for the pod, gets the pod's
// fsGroup (OnRootMismatch), survives a nodelet restart with the pod running
// (same mount, container not restarted) and keeps its data across the pod's
// deletion and re-creation; the pod's deletion unmounts it.
func TestPVCLocalVolume(t *testing.T) {
	f := framework.New(t)
	ctx := context.Background()
	ns := f.NewNamespace()
	n := startNode(t, f, framework.NodeletOptions{})
	dir := t.TempDir()
	pvName := ns + "-local"
	pv := pvFor(ns, "local", pvName, v1.PersistentVolumeSource{Local: &v1.LocalVolumeSource{Path: dir}})
	pv.Spec.NodeAffinity = onThisNode(ctx, t, f)
	createPV(ctx, t, f, pv)
	createClaim(ctx, t, f, ns, "local")
	waitClaimBound(ctx, t, ns, "local", f)

	const gid = 2345
	vol := pvcVolume("local")
	var mountPath string
	writeThenRead(ctx, t, f, ns, vol, func(w *v1.Pod) {
		mountPath = filepath.Join(n.RootDir, "pods", string(w.UID), "volumes", "kubernetes.io~local-volume", pvName)
		if mounted, err := mountutil.IsMountPoint(mountPath); err != nil || !mounted {
			t.Fatalf("%s is not a mount point (%v)", mountPath, err)
		}
		fi, err := os.Stat(dir)
		if err != nil {
			t.Fatal(err)
		}
		if st := fi.Sys().(*syscall.Stat_t); st.Gid != gid || fi.Mode()&os.ModeSetgid == 0 {
			t.Errorf("local volume root has gid %d mode %v; want the pod's fsGroup %d with setgid", st.Gid, fi.Mode(), gid)
		}
		before := f.WaitForPodReady(ctx, ns, w.Name, time.Minute)
		n.Restart()
		f.WaitForNodeReady(ctx, 2*time.Minute)
		// Time for the restarted nodelet to sync the pod, which sets its
		// volumes up again: the mount must be reused, the container kept.
		time.Sleep(10 * time.Second)
		after := f.WaitForPodReady(ctx, ns, w.Name, time.Minute)
		if a, b := after.Status.ContainerStatuses[0], before.Status.ContainerStatuses[0]; a.ContainerID != b.ContainerID || a.RestartCount != b.RestartCount {
			t.Errorf("container changed across the nodelet restart: %s/%d → %s/%d", b.ContainerID, b.RestartCount, a.ContainerID, a.RestartCount)
		}
		if mounted, err := mountutil.IsMountPoint(mountPath); err != nil || !mounted {
			t.Errorf("%s not mounted after the nodelet restart (%v)", mountPath, err)
		}
		if b, err := os.ReadFile(filepath.Join(dir, "token")); err != nil || !strings.Contains(string(b), "written-by-the-first-pod") {
			t.Errorf("the pod's write is not in the local volume: %q, %v", b, err)
		}
	}, func(p *v1.Pod) {
		p.Spec.SecurityContext = &v1.PodSecurityContext{FSGroup: ptr.To[int64](gid), FSGroupChangePolicy: ptr.To(v1.FSGroupChangeOnRootMismatch)}
	})
	// The writer was force-deleted: its teardown follows the deletion.
	err := framework.WaitFor(ctx, 30*time.Second, mountPath+" to be unmounted after its pod was deleted", func(context.Context) (bool, error) {
		mounted, err := mountutil.IsMountPoint(mountPath)
		return !mounted, err
	})
	if err != nil {
		t.Error(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "token")); err != nil {
		t.Errorf("the volume's data is gone after its pods were: %v", err)
	}
}

// TestPVCMissingClaimWaits: a pod whose claim does not exist stays Pending
// with upstream's FailedMount naming the claim, and runs once the claim and
// its volume are created; a claim bound to a volume type nodelet cannot
// mount (nfs) waits with the type named.
func TestPVCMissingClaimWaits(t *testing.T) {
	f := framework.New(t)
	ctx := context.Background()
	ns := f.NewNamespace()
	startNode(t, f, framework.NodeletOptions{})

	p := f.CreatePod(ctx, claimPod(f, ns, "waiter", pvcVolume("late"), v1.RestartPolicyAlways, "trap 'exit 0' TERM; while true; do sleep 1; done"))
	msg := waitForPodEvent(t, f, ns, p.Name, "FailedMount", "error processing PVC "+ns+"/late")
	want := "Unable to attach or mount volumes: unmounted volumes=[data], unattached volumes=[], failed to process volumes=[data]: error processing PVC " +
		ns + `/late: failed to fetch PVC from API server: persistentvolumeclaims "late" not found`
	if msg != want {
		t.Errorf("FailedMount message\n%s\nwant\n%s", msg, want)
	}
	f.WaitForPod(ctx, ns, p.Name, 30*time.Second, "to be Pending in ContainerCreating", func(p *v1.Pod) bool {
		cs := p.Status.ContainerStatuses
		return p.Status.Phase == v1.PodPending && len(cs) == 1 && cs[0].State.Waiting != nil && cs[0].State.Waiting.Reason == "ContainerCreating"
	})

	createPV(ctx, t, f, pvFor(ns, "late", ns+"-late", hostPathSource(filepath.Join(t.TempDir(), "late"))))
	createClaim(ctx, t, f, ns, "late")
	waitClaimBound(ctx, t, ns, "late", f)
	// The failed sync is retried after its back-off (10s ± 50%).
	f.WaitForPodReady(ctx, ns, p.Name, time.Minute)

	createPV(ctx, t, f, pvFor(ns, "nfs", ns+"-nfs", v1.PersistentVolumeSource{
		NFS: &v1.NFSVolumeSource{Server: "192.0.2.1", Path: "/export"},
	}))
	createClaim(ctx, t, f, ns, "nfs")
	waitClaimBound(ctx, t, ns, "nfs", f)
	q := f.CreatePod(ctx, claimPod(f, ns, "nfs-user", pvcVolume("nfs"), v1.RestartPolicyAlways, "sleep 3600"))
	waitForPodEvent(t, f, ns, q.Name, "FailedMount", "PersistentVolume "+ns+"-nfs is of type nfs, which this node agent cannot mount")
}

// TestPVCGenericEphemeralVolume: the ephemeral-volume controller creates the
// claim <pod>-<volume> owned by the pod, the binder binds it to the volume
// pre-created for it, and the pod runs with it.
func TestPVCGenericEphemeralVolume(t *testing.T) {
	f := framework.New(t)
	ctx := context.Background()
	ns := f.NewNamespace()
	startNode(t, f, framework.NodeletOptions{})
	dir := filepath.Join(t.TempDir(), "ephemeral")
	createPV(ctx, t, f, pvFor(ns, "eph-scratch", ns+"-eph", hostPathSource(dir)))
	vol := v1.Volume{Name: "scratch", VolumeSource: v1.VolumeSource{Ephemeral: &v1.EphemeralVolumeSource{
		VolumeClaimTemplate: &v1.PersistentVolumeClaimTemplate{Spec: claimSpec()},
	}}}
	p := f.CreatePod(ctx, claimPod(f, ns, "eph", vol, v1.RestartPolicyAlways,
		"echo ephemeral > /data/f && trap 'exit 0' TERM && while true; do sleep 1; done"))
	waitClaimBound(ctx, t, ns, "eph-scratch", f)
	f.WaitForPodReady(ctx, ns, p.Name, 2*time.Minute)
	pvc, err := f.Client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "eph-scratch", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !metav1.IsControlledBy(pvc, p) {
		t.Errorf("claim %s is not controlled by pod %s: %v", pvc.Name, p.Name, pvc.OwnerReferences)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "f")); err != nil || strings.TrimSpace(string(b)) != "ephemeral" {
		t.Errorf("the pod's write is not in the ephemeral volume: %q, %v", b, err)
	}
}
