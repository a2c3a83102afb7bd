//go:build e2e

package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"

	"github.com/nodelet/nodelet/test/e2e/framework"
)

// TestCSIExpand: a running pod's CSI claim (5Mi) is raised to 10Mi. The rig has no
// external-resizer (not served by the module proxy), so the test plays its controller part
// for a driver whose volumes need node expansion, as external-resizer does after a
// ControllerExpandVolume answering node_expansion_required: the PV's spec.capacity becomes
// 10Mi, and the claim's status gets allocatedResources storage=10Mi,
// allocatedResourceStatuses storage=NodeResizePending and the FileSystemResizePending
// condition (status.capacity stays 5Mi). The node agent then calls NodeExpandVolume once for
// the volume (required_bytes 10Mi, on the pod's publish path and the staging path), finishes
// the claim's status (capacity 10Mi, no resize status or condition) and records
// FileSystemResizeSuccessful on the pod; the pod keeps running, never restarted, and later
// syncs call nothing more. The time from the resize to the claim's new capacity is logged.
func TestCSIExpand(t *testing.T) {
	ctx := context.Background()
	f := framework.New(t)
	ns := f.NewNamespace()
	// Pods are synced every 5 s, so the resize is seen soon (upstream's volume manager
	// looks every 100 ms; nodelet on each pod sync).
	n := startNode(t, f, framework.NodeletOptions{Config: func(c *kubeletconfigv1beta1.KubeletConfiguration) {
		c.SyncFrequency = metav1.Duration{Duration: 5 * time.Second}
	}})
	d := f.StartCSIDriver(n)
	csiClaim(ctx, t, f, ns, "data")
	p := scheduledPod(ctx, t, f, claimPod(f, ns, "grower", pvcVolume("data"), v1.RestartPolicyAlways,
		"trap 'exit 0' TERM && while true; do sleep 1; done"))
	pv := boundPV(ctx, t, f, ns, "data")
	pod := f.WaitForPodReady(ctx, ns, p.Name, 3*time.Minute)
	handle := pv.Spec.CSI.VolumeHandle
	five, ten := resource.MustParse("5Mi"), resource.MustParse("10Mi")

	pvcs := f.Client.CoreV1().PersistentVolumeClaims(ns)
	pvc, err := pvcs.Get(ctx, "data", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if q := pvc.Status.Capacity[v1.ResourceStorage]; q.Cmp(five) != 0 {
		t.Fatalf("claim capacity %s before the resize; want 5Mi", q.String())
	}
	if got := countCalls(d, "NodeExpandVolume", handle); got != 0 {
		t.Fatalf("%d NodeExpandVolume calls before the resize", got)
	}

	// The user raises the claim.
	pvc.Spec.Resources.Requests[v1.ResourceStorage] = ten
	if pvc, err = pvcs.Update(ctx, pvc, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("raising the claim to 10Mi: %v", err)
	}
	resized := time.Now()
	// The test as external-resizer: the volume grew in the controller, the node must finish.
	pv, err = f.Client.CoreV1().PersistentVolumes().Get(ctx, pv.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pv.Spec.Capacity[v1.ResourceStorage] = ten
	if _, err := f.Client.CoreV1().PersistentVolumes().Update(ctx, pv, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("growing PV %s to 10Mi: %v", pv.Name, err)
	}
	pvc.Status.AllocatedResources = v1.ResourceList{v1.ResourceStorage: ten}
	pvc.Status.AllocatedResourceStatuses = map[v1.ResourceName]v1.ClaimResourceStatus{v1.ResourceStorage: v1.PersistentVolumeClaimNodeResizePending}
	pvc.Status.Conditions = append(pvc.Status.Conditions, v1.PersistentVolumeClaimCondition{
		Type: v1.PersistentVolumeClaimFileSystemResizePending, Status: v1.ConditionTrue, LastTransitionTime: metav1.Now(),
		Message: "Waiting for user to (re-)start a pod to finish file system resize of volume on node.",
	})
	if _, err := pvcs.UpdateStatus(ctx, pvc, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("marking the claim NodeResizePending: %v", err)
	}

	d.WaitForCalls(ctx, "NodeExpandVolume", handle, 1, 2*time.Minute)
	var final *v1.PersistentVolumeClaim
	err = framework.WaitFor(ctx, time.Minute, "claim data's status capacity to be 10Mi", func(ctx context.Context) (bool, error) {
		c, err := pvcs.Get(ctx, "data", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		final = c
		q := c.Status.Capacity[v1.ResourceStorage]
		return q.Cmp(ten) == 0, nil
	})
	if err != nil {
		t.Fatalf("%v; status %+v", err, final.Status)
	}
	t.Logf("claim capacity 10Mi %v after the resize", time.Since(resized).Round(time.Millisecond))
	if len(final.Status.AllocatedResourceStatuses) != 0 {
		t.Errorf("claim resize status after the expansion: %v; want none", final.Status.AllocatedResourceStatuses)
	}
	for _, c := range final.Status.Conditions {
		if c.Type == v1.PersistentVolumeClaimFileSystemResizePending || c.Type == v1.PersistentVolumeClaimNodeResizeError {
			t.Errorf("claim condition %s left after the expansion: %+v", c.Type, c)
		}
	}
	for _, c := range d.Calls() {
		if c.Method != "NodeExpandVolume" || c.VolumeID != handle {
			continue
		}
		if c.RequiredBytes != ten.Value() || !strings.HasSuffix(c.VolumePath, "/pods/"+string(pod.UID)+"/volumes/kubernetes.io~csi/"+pv.Name+"/mount") ||
			!strings.HasSuffix(c.StagingPath, "/globalmount") || c.Error != "" {
			t.Errorf("NodeExpandVolume call: %+v", c)
		}
	}
	ev := waitForEvent(ctx, t, f, ns, pod.Name, "FileSystemResizeSuccessful", time.Minute)
	if want := `MountVolume.NodeExpandVolume succeeded for volume "` + pv.Name + `" ` + f.Env.NodeName; ev.Message != want || ev.Type != v1.EventTypeNormal {
		t.Errorf("event %s %q; want Normal %q", ev.Type, ev.Message, want)
	}

	// Later syncs (at least two) call nothing more; the pod was never restarted.
	time.Sleep(12 * time.Second)
	if got := countCalls(d, "NodeExpandVolume", handle); got != 1 {
		t.Errorf("%d NodeExpandVolume calls on %s; want 1", got, handle)
	}
	cur, err := f.Client.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cur.Status.Phase != v1.PodRunning || len(cur.Status.ContainerStatuses) != 1 || cur.Status.ContainerStatuses[0].RestartCount != 0 ||
		cur.Status.ContainerStatuses[0].State.Running == nil {
		t.Errorf("pod after the expansion: phase %s, containers %+v", cur.Status.Phase, cur.Status.ContainerStatuses)
	}
}
