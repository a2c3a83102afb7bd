//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/nodelet/nodelet/test/e2e/framework"
)

// TestCSIVolumeStats (issue 18): with volumeStatsAggPeriod 2s, a pod whose CSI claim it wrote
// some MiB to gets the claim's usage from the driver's NodeGetVolumeStats:
// kubelet_volume_stats_* series labelled with the claim on /metrics, and in the Summary a
// volume stat with the claim's PVCRef, capacity and used bytes. The time from the pod's Ready
// to the first series is logged.
func TestCSIVolumeStats(t *testing.T) {
	ctx := context.Background()
	f := framework.New(t)
	ns := f.NewNamespace()
	n := startNode(t, f, framework.NodeletOptions{Config: func(c *kubeletconfigv1beta1.KubeletConfiguration) {
		c.VolumeStatsAggPeriod = metav1.Duration{Duration: 2 * time.Second}
	}})
	f.StartCSIDriver(n)
	csiClaim(ctx, t, f, ns, "data")
	p := scheduledPod(ctx, t, f, claimPod(f, ns, "writer", pvcVolume("data"), v1.RestartPolicyAlways,
		"dd if=/dev/urandom of=/data/blob bs=1M count=3 && sync && trap 'exit 0' TERM && while true; do sleep 1; done"))
	boundPV(ctx, t, f, ns, "data")
	f.WaitForPodReady(ctx, ns, p.Name, 3*time.Minute)
	ready := time.Now()

	labels := fmt.Sprintf(`{namespace=%q,persistentvolumeclaim=%q}`, ns, "data")
	var metrics string
	err := framework.WaitFor(ctx, time.Minute, "kubelet_volume_stats_used_bytes"+labels+" on /metrics", func(ctx context.Context) (bool, error) {
		metrics = nodeMetrics(t, ctx, f)
		return metricValue(metrics, "kubelet_volume_stats_used_bytes"+labels) > 0, nil
	})
	if err != nil {
		t.Fatalf("%v:\n%s", err, grepLines(metrics, "kubelet_volume_stats"))
	}
	t.Logf("kubelet_volume_stats_used_bytes appeared %v after the pod was Ready", time.Since(ready).Round(time.Millisecond))
	for _, m := range []string{"capacity_bytes", "available_bytes", "inodes", "inodes_free", "inodes_used"} {
		if metricValue(metrics, "kubelet_volume_stats_"+m+labels) < 0 {
			t.Errorf("/metrics has no kubelet_volume_stats_%s%s:\n%s", m, labels, grepLines(metrics, "kubelet_volume_stats"))
		}
	}
	used, capacity := metricValue(metrics, "kubelet_volume_stats_used_bytes"+labels), metricValue(metrics, "kubelet_volume_stats_capacity_bytes"+labels)
	if used > capacity {
		t.Errorf("used %v > capacity %v", used, capacity)
	}

	// The Summary is measured in the background every housekeeping period
	// (10s): it may show the claim up to a period after /metrics does.
	var vol *statsapi.VolumeStats
	_ = framework.WaitFor(ctx, 30*time.Second, "the claim's volume data in the Summary", func(ctx context.Context) (bool, error) {
		var summary statsapi.Summary
		if err := json.Unmarshal([]byte(mustKubectl(t, ctx, f, "get", "--raw", "/api/v1/nodes/"+f.Env.NodeName+"/proxy/stats/summary")), &summary); err != nil {
			t.Fatalf("decoding the Summary: %v", err)
		}
		for _, ps := range summary.Pods {
			if ps.PodRef.Namespace != ns || ps.PodRef.Name != "writer" {
				continue
			}
			for i := range ps.VolumeStats {
				if ps.VolumeStats[i].Name == "data" {
					vol = &ps.VolumeStats[i]
				}
			}
		}
		return vol != nil, nil
	})
	switch {
	case vol == nil:
		t.Errorf("the Summary has no volume data of %s/writer", ns)
	case vol.PVCRef == nil || vol.PVCRef.Name != "data" || vol.PVCRef.Namespace != ns:
		t.Errorf("volume data has PVCRef %+v, want %s/data", vol.PVCRef, ns)
	case vol.UsedBytes == nil || *vol.UsedBytes < 3<<20 || vol.CapacityBytes == nil || *vol.CapacityBytes < *vol.UsedBytes:
		t.Errorf("volume data: used %v capacity %v, want at least the 3 MiB written, within capacity", ptrVal(vol.UsedBytes), ptrVal(vol.CapacityBytes))
	}
}

func ptrVal(p *uint64) any {
	if p == nil {
		return nil
	}
	return *p
}
