package stats

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/testsupport/eventually"
	"github.com/nodelet/nodelet/volumes"
)

func usage(unit csipb.VolumeUsage_Unit, total, avail, used int64) *csipb.VolumeUsage {
	return &csipb.VolumeUsage{Unit: unit, Total: total, Available: avail, Used: used}
}

func TestCSIVolumeStatsFromUsage(t *testing.T) {
	bytes := usage(csipb.VolumeUsage_BYTES, 1000, 600, 400)
	inodes := usage(csipb.VolumeUsage_INODES, 100, 90, 10)
	abnormal := &csipb.VolumeCondition{Abnormal: true, Message: "disk gone"}
	tests := []struct {
		name    string
		resp    *csipb.NodeGetVolumeStatsResponse
		health  bool
		want    [6]uint64 // capacity, available, used, inodes, free, used inodes
		bad     *bool
		wantErr bool
	}{
		{name: "bytes and inodes", resp: &csipb.NodeGetVolumeStatsResponse{Usage: []*csipb.VolumeUsage{bytes, inodes}}, want: [6]uint64{1000, 600, 400, 100, 90, 10}},
		{name: "bytes only: inodes 0 as upstream", resp: &csipb.NodeGetVolumeStatsResponse{Usage: []*csipb.VolumeUsage{bytes}}, want: [6]uint64{1000, 600, 400, 0, 0, 0}},
		{name: "unknown unit ignored", resp: &csipb.NodeGetVolumeStatsResponse{Usage: []*csipb.VolumeUsage{usage(csipb.VolumeUsage_UNKNOWN, 5, 5, 5), inodes}}, want: [6]uint64{0, 0, 0, 100, 90, 10}},
		{name: "negative figures are 0", resp: &csipb.NodeGetVolumeStatsResponse{Usage: []*csipb.VolumeUsage{usage(csipb.VolumeUsage_BYTES, 1000, -1, 400)}}, want: [6]uint64{1000, 0, 400, 0, 0, 0}},
		{name: "no usage is an error", resp: &csipb.NodeGetVolumeStatsResponse{}, wantErr: true},
		{name: "condition without health: not reported", resp: &csipb.NodeGetVolumeStatsResponse{Usage: []*csipb.VolumeUsage{bytes}, VolumeCondition: abnormal}, want: [6]uint64{1000, 600, 400, 0, 0, 0}},
		{name: "abnormal with health", resp: &csipb.NodeGetVolumeStatsResponse{Usage: []*csipb.VolumeUsage{bytes}, VolumeCondition: abnormal}, health: true, want: [6]uint64{1000, 600, 400, 0, 0, 0}, bad: ptrTo(true)},
		{name: "no condition with health: normal", resp: &csipb.NodeGetVolumeStatsResponse{Usage: []*csipb.VolumeUsage{bytes}}, health: true, want: [6]uint64{1000, 600, 400, 0, 0, 0}, bad: ptrTo(false)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := csiVolumeStats(tt.resp, tt.health)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			fs := got.stats.FsStats
			if g := [6]uint64{deref(fs.CapacityBytes), deref(fs.AvailableBytes), deref(fs.UsedBytes), deref(fs.Inodes), deref(fs.InodesFree), deref(fs.InodesUsed)}; g != tt.want {
				t.Errorf("figures = %v, want %v", g, tt.want)
			}
			if (got.abnormal == nil) != (tt.bad == nil) || got.abnormal != nil && *got.abnormal != *tt.bad {
				t.Errorf("abnormal = %v, want %v", got.abnormal, tt.bad)
			}
		})
	}
}

func TestJittered(t *testing.T) {
	for _, tt := range []struct {
		r    float64
		want time.Duration
	}{{0, time.Minute}, {0.5, 90 * time.Second}, {0.999, time.Minute + 59940*time.Millisecond}} {
		if got := jittered(time.Minute, tt.r); got != tt.want {
			t.Errorf("jittered(1m, %v) = %v, want %v", tt.r, got, tt.want)
		}
	}
}

// fakeCSI is a driver's node service: GET_VOLUME_STATS unless noStats, usage from used.
type fakeCSI struct {
	csipb.NodeClient
	noStats   bool
	condition bool
	used      int64
	err       error
	asked     []*csipb.NodeGetVolumeStatsRequest
}

// fakeRegistry has one driver registered: csi.test.
type fakeRegistry struct{ drv *fakeCSI }

func (r fakeRegistry) NodeClient(_ context.Context, driver string) (csipb.NodeClient, error) {
	if driver != "csi.test" {
		return nil, errors.New("driver name " + driver + " not found in the list of registered CSI drivers")
	}
	return r.drv, nil
}

func (f *fakeCSI) NodeGetCapabilities(context.Context, *csipb.NodeGetCapabilitiesRequest, ...grpc.CallOption) (*csipb.NodeGetCapabilitiesResponse, error) {
	rpc := func(t csipb.NodeServiceCapability_RPC_Type) *csipb.NodeServiceCapability {
		return &csipb.NodeServiceCapability{Type: &csipb.NodeServiceCapability_Rpc{Rpc: &csipb.NodeServiceCapability_RPC{Type: t}}}
	}
	resp := &csipb.NodeGetCapabilitiesResponse{Capabilities: []*csipb.NodeServiceCapability{rpc(csipb.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME)}}
	if !f.noStats {
		resp.Capabilities = append(resp.Capabilities, rpc(csipb.NodeServiceCapability_RPC_GET_VOLUME_STATS))
	}
	if f.condition {
		resp.Capabilities = append(resp.Capabilities, rpc(csipb.NodeServiceCapability_RPC_VOLUME_CONDITION))
	}
	return resp, nil
}

func (f *fakeCSI) NodeGetVolumeStats(_ context.Context, req *csipb.NodeGetVolumeStatsRequest, _ ...grpc.CallOption) (*csipb.NodeGetVolumeStatsResponse, error) {
	f.asked = append(f.asked, req)
	if f.err != nil {
		return nil, f.err
	}
	return &csipb.NodeGetVolumeStatsResponse{
		Usage:           []*csipb.VolumeUsage{usage(csipb.VolumeUsage_BYTES, 1<<30, 1<<30-f.used, f.used), usage(csipb.VolumeUsage_INODES, 1000, 900, 100)},
		VolumeCondition: &csipb.VolumeCondition{Abnormal: true, Message: "degraded"},
	}, nil
}

type fakeLister map[types.UID][]volumes.MountedVolume

func (l fakeLister) MountedVolumes(pod *v1.Pod) []volumes.MountedVolume { return l[pod.UID] }

// volumeFixture is two pods: a has an emptyDir with 64 KiB, a local PV claim and a CSI
// claim; b mounts the same CSI claim and a volume of an unregistered driver.
func volumeFixture(t *testing.T) (root string, pods []*v1.Pod, lister fakeLister) {
	root = t.TempDir()
	scratch := filepath.Join(root, "pods/a/volumes/kubernetes.io~empty-dir/scratch")
	write(t, filepath.Join(scratch, "data"), string(make([]byte, 64<<10)))
	local := filepath.Join(root, "pods/a/volumes/kubernetes.io~local-volume/pv-local")
	if err := os.MkdirAll(local, 0o750); err != nil {
		t.Fatal(err)
	}
	pod := func(uid string) *v1.Pod {
		return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "pod-" + uid, UID: types.UID(uid)}}
	}
	csiVol := volumes.MountedVolume{Name: "data", Kind: volumes.MetricsCSI, Path: "/pub/data/mount", Claim: "shared", CSIDriver: "csi.test", CSIHandle: "h1"}
	lister = fakeLister{
		"a": {
			{Name: "scratch", Kind: volumes.MetricsDu, Path: scratch},
			{Name: "missing", Kind: volumes.MetricsDu, Path: filepath.Join(root, "pods/a/volumes/kubernetes.io~empty-dir/missing")},
			{Name: "local", Kind: volumes.MetricsStatfs, Path: local, Claim: "local-claim"},
			csiVol,
		},
		"b": {csiVol, {Name: "other", Kind: volumes.MetricsCSI, Path: "/pub/other/mount", Claim: "other", CSIDriver: "gone.test", CSIHandle: "h2"}},
	}
	return root, []*v1.Pod{pod("a"), pod("b")}, lister
}

func statsByName(vs []statsapi.VolumeStats) map[string]statsapi.VolumeStats {
	out := map[string]statsapi.VolumeStats{}
	for _, v := range vs {
		out[v.Name] = v
	}
	return out
}

// TestVolumeStatsCacheRunsEveryPeriod: Run measures at once, then again after a
// (jittered) volumeStatsAggPeriod, and returns when its context ends; with a period of 0 it
// measures nothing.
func TestVolumeStatsCacheRunsEveryPeriod(t *testing.T) {
	root, pods, lister := volumeFixture(t)
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	drv := &fakeCSI{used: 5 << 20}
	c := NewVolumeStatsCache(VolumeStatsConfig{Period: time.Minute, RootDir: root, Pods: func() []*v1.Pod { return pods }, Volumes: lister, CSI: fakeRegistry{drv}, Clock: clk})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); c.Run(ctx) }()
	defer func() { cancel(); <-done }()

	eventually.True(t, "the first refresh", func() bool { _, ok := c.PodVolumeStats("a"); return ok && clk.HasWaiters() })
	vs, _ := c.PodVolumeStats("a")
	got := statsByName(vs)
	if len(got) != 3 {
		t.Fatalf("pod a volume stats = %+v, want scratch, local and data (missing skipped)", vs)
	}
	if s := got["scratch"]; deref(s.UsedBytes) < 64<<10 || s.PVCRef != nil || s.CapacityBytes == nil || !s.Time.Equal(ptrTo(metav1.NewTime(clk.Now()))) {
		t.Errorf("scratch = %+v, want >= 64 KiB used, the filesystem's capacity, no PVCRef, measured now", s)
	}
	if s := got["local"]; s.CapacityBytes == nil || s.Inodes == nil || s.PVCRef == nil || *s.PVCRef != (statsapi.PVCReference{Name: "local-claim", Namespace: "ns"}) {
		t.Errorf("local = %+v (PVCRef %v), want statfs figures and the claim", s, s.PVCRef)
	}
	if s := got["data"]; deref(s.UsedBytes) != 5<<20 || deref(s.CapacityBytes) != 1<<30 || deref(s.InodesUsed) != 100 || s.PVCRef == nil || s.PVCRef.Name != "shared" {
		t.Errorf("data = %+v, want the driver's figures and the claim", s)
	}
	if len(drv.asked) != 2 || drv.asked[0].GetVolumeId() != "h1" || drv.asked[0].GetVolumePath() != "/pub/data/mount" {
		t.Errorf("NodeGetVolumeStats calls = %v, want h1 at its publish path, once per pod", drv.asked)
	}
	if vs, _ := c.PodVolumeStats("b"); len(vs) != 1 || vs[0].Name != "data" {
		t.Errorf("pod b volume stats = %+v, want data only (the unregistered driver's volume skipped)", vs)
	}

	drv.used = 7 << 20
	clk.Step(2 * time.Minute) // past any jitter
	eventually.True(t, "the second refresh", func() bool {
		vs, _ := c.PodVolumeStats("a")
		return deref(statsByName(vs)["data"].UsedBytes) == 7<<20
	})

	off := NewVolumeStatsCache(VolumeStatsConfig{Period: 0, RootDir: root, Pods: func() []*v1.Pod { return pods }, Volumes: lister, CSI: fakeRegistry{drv}, Clock: clk})
	off.Run(context.Background()) // returns at once
	if _, ok := off.PodVolumeStats("a"); ok || off.Enabled() {
		t.Error("volumeStatsAggPeriod 0 measured volumes")
	}
}

// TestVolumeStatsCacheCSIWithoutStats: a driver without GET_VOLUME_STATS is not asked and its
// volumes have no stats; a failing call leaves the volume out.
func TestVolumeStatsCacheCSIWithoutStats(t *testing.T) {
	for _, drv := range []*fakeCSI{{noStats: true}, {err: errors.New("boom")}} {
		root, pods, lister := volumeFixture(t)
		c := NewVolumeStatsCache(VolumeStatsConfig{Period: time.Minute, RootDir: root, Pods: func() []*v1.Pod { return pods }, Volumes: lister, CSI: fakeRegistry{drv}, Clock: clocktesting.NewFakeClock(time.Unix(0, 0))})
		c.Refresh(context.Background())
		vs, _ := c.PodVolumeStats("a")
		if _, ok := statsByName(vs)["data"]; ok || len(vs) != 2 {
			t.Errorf("noStats=%v err=%v: stats %+v, want scratch and local only", drv.noStats, drv.err, vs)
		}
		if drv.noStats && len(drv.asked) != 0 {
			t.Errorf("a driver without GET_VOLUME_STATS was asked %d times", len(drv.asked))
		}
	}
}

// TestVolumeStatsMetrics: kubelet_volume_stats_* from the cache, one series per claim (a
// claim of two pods once), none for volumes without a claim; the health series only when the
// condition was asked (CSIVolumeHealth and VOLUME_CONDITION).
func TestVolumeStatsMetrics(t *testing.T) {
	for _, health := range []bool{false, true} {
		root, pods, lister := volumeFixture(t)
		drv := &fakeCSI{used: 5 << 20, condition: true}
		c := NewVolumeStatsCache(VolumeStatsConfig{Period: time.Minute, RootDir: root, Pods: func() []*v1.Pod { return pods }, Volumes: lister, CSI: fakeRegistry{drv}, VolumeHealth: health, Clock: clocktesting.NewFakeClock(time.Unix(0, 0))})
		c.Refresh(context.Background())
		want := `
# HELP kubelet_volume_stats_used_bytes Number of used bytes in the volume
# TYPE kubelet_volume_stats_used_bytes gauge
kubelet_volume_stats_used_bytes{namespace="ns",persistentvolumeclaim="shared"} 5.24288e+06
# HELP kubelet_volume_stats_inodes_used Number of used inodes in the volume
# TYPE kubelet_volume_stats_inodes_used gauge
kubelet_volume_stats_inodes_used{namespace="ns",persistentvolumeclaim="shared"} 100
`
		names := []string{"kubelet_volume_stats_used_bytes", "kubelet_volume_stats_inodes_used"}
		if health {
			want += `
# HELP kubelet_volume_stats_health_status_abnormal Abnormal volume health status. The count is either 1 or 0. 1 indicates the volume is unhealthy, 0 indicates volume is healthy
# TYPE kubelet_volume_stats_health_status_abnormal gauge
kubelet_volume_stats_health_status_abnormal{namespace="ns",persistentvolumeclaim="shared"} 1
`
			names = append(names, "kubelet_volume_stats_health_status_abnormal")
		}
		// The local claim's figures are the temp dir's filesystem's: only its presence is checked.
		if n := testutil.CollectAndCount(c, "kubelet_volume_stats_capacity_bytes"); n != 2 {
			t.Errorf("health=%v: %d capacity series, want 2 (shared once, local-claim)", health, n)
		}
		localOnly := strings.NewReader(want)
		if err := testutil.CollectAndCompare(&claimFilter{c: c, claim: "shared"}, localOnly, names...); err != nil {
			t.Errorf("health=%v: %v", health, err)
		}
		if n := testutil.CollectAndCount(c, "kubelet_volume_stats_health_status_abnormal"); health && n != 1 || !health && n != 0 {
			t.Errorf("health=%v: %d health series", health, n)
		}
	}
}

// TestSummaryReadsVolumeStatsCache: with a cache, the Summary's volume stats are the cache's
// (nothing is walked per request); a pod not measured yet has none.
func TestSummaryReadsVolumeStatsCache(t *testing.T) {
	root, pods, lister := volumeFixture(t)
	cache := NewVolumeStatsCache(VolumeStatsConfig{Period: time.Minute, RootDir: root, Pods: func() []*v1.Pod { return pods[:1] }, Volumes: lister, CSI: fakeRegistry{&fakeCSI{used: 1 << 20}}, Clock: clocktesting.NewFakeClock(time.Unix(0, 0))})
	sb := func(uid string) *runtimeapi.PodSandbox {
		return &runtimeapi.PodSandbox{Id: "sb-" + uid, Metadata: &runtimeapi.PodSandboxMetadata{Name: "pod-" + uid, Namespace: "ns", Uid: uid}, State: runtimeapi.PodSandboxState_SANDBOX_READY}
	}
	rt := &fakeRuntime{sandboxes: []*runtimeapi.PodSandbox{sb("a"), sb("b")}, imageFs: &runtimeapi.ImageFsInfoResponse{}}
	p := New(Config{RootDir: root, PodLogsDir: t.TempDir(), ProcRoot: t.TempDir(), VolumeStats: cache}, rt, func() []*v1.Pod { return pods }, clocktesting.NewFakeClock(time.Unix(0, 0)))
	before, err := p.Summary(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, ps := range before.Pods {
		if len(ps.VolumeStats) != 0 {
			t.Errorf("pod %s has volume stats %+v before any refresh", ps.PodRef.Name, ps.VolumeStats)
		}
	}
	cache.Refresh(context.Background())
	s, err := p.Summary(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, ps := range s.Pods {
		vs := statsByName(ps.VolumeStats)
		switch ps.PodRef.UID {
		case "a":
			if d := vs["data"]; len(vs) != 3 || d.PVCRef == nil || d.PVCRef.Name != "shared" || deref(d.UsedBytes) != 1<<20 {
				t.Errorf("pod a volume stats = %+v, want the cache's three with data's PVCRef", ps.VolumeStats)
			}
			if ps.EphemeralStorage == nil {
				t.Error("pod a has no ephemeral storage")
			}
		case "b":
			if len(vs) != 0 {
				t.Errorf("pod b (not measured) has volume stats %+v", ps.VolumeStats)
			}
		}
	}
}

// claimFilter passes on only the series of one claim.
type claimFilter struct {
	c     prometheus.Collector
	claim string
}

func (f *claimFilter) Describe(ch chan<- *prometheus.Desc) { f.c.Describe(ch) }

func (f *claimFilter) Collect(ch chan<- prometheus.Metric) {
	all := make(chan prometheus.Metric)
	go func() { f.c.Collect(all); close(all) }()
	for m := range all {
		var pb dto.Metric
		if err := m.Write(&pb); err != nil {
			continue
		}
		for _, l := range pb.GetLabel() {
			if l.GetName() == "persistentvolumeclaim" && l.GetValue() == f.claim {
				ch <- m
			}
		}
	}
}
