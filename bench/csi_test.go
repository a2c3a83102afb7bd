//go:build bench

package bench

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodelet/nodelet/test/e2e/framework"
)

// TestCSIMount creates N pods (BENCH_PODS, 10 by default) one after another, each with
// its own claim of the test CSI driver's WaitForFirstConsumer class, and reports create →
// Ready (what a user waits: scheduling, provisioning, attach by the attach/detach controller
// and csi-attacher, stage and publish by the node agent, container start) and create → claim
// bound (the controllers' share).
func TestCSIMount(t *testing.T) {
	f := framework.New(t)
	ctx := context.Background()
	ns := f.NewNamespace()
	n := f.StartNodelet(framework.NodeletOptions{})
	f.WaitForNodeReady(ctx, 2*time.Minute)
	f.StartCSIDriver(n)
	count := pods()
	if count == 20 && os.Getenv("BENCH_PODS") == "" {
		count = 10
	}
	var ready, bound []time.Duration
	for i := range count {
		name := fmt.Sprintf("csi-%d", i)
		pvc := framework.CSIClaim(ns, name, "5Mi")
		if _, err := f.Client.CoreV1().PersistentVolumeClaims(ns).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		p := f.BusyboxPod(ns, name, "sh", "-c", "echo x > /data/x && sleep 3600")
		p.Spec.Volumes = []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: name}}}}
		p.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "data", MountPath: "/data"}}
		// For the scheduler (WaitForFirstConsumer): no nodeName; the rig runs no node
		// lifecycle controller to lift the not-ready taint an agent may register with.
		p.Spec.Tolerations = []v1.Toleration{{Key: v1.TaintNodeNotReady, Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoSchedule}}
		start := time.Now()
		if _, err := f.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		var boundAt time.Duration
		err := framework.WaitFor(ctx, 2*time.Minute, "pod "+name+" Ready", func(ctx context.Context) (bool, error) {
			if boundAt == 0 {
				if c, err := f.Client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, name, metav1.GetOptions{}); err == nil && c.Status.Phase == v1.ClaimBound {
					boundAt = time.Since(start)
				}
			}
			pod, err := f.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			for _, c := range pod.Status.Conditions {
				if c.Type == v1.PodReady && c.Status == v1.ConditionTrue {
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		ready = append(ready, time.Since(start))
		bound = append(bound, boundAt)
	}
	fmt.Printf("BENCH csi pods=%d create->Ready p50=%v p90=%v max=%v\n", count, percentile(ready, .5).Round(time.Millisecond), percentile(ready, .9).Round(time.Millisecond), percentile(ready, 1).Round(time.Millisecond))
	fmt.Printf("BENCH csi pods=%d create->claim-bound p50=%v p90=%v\n", count, percentile(bound, .5).Round(time.Millisecond), percentile(bound, .9).Round(time.Millisecond))
}
