package eviction

import (
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/podutil"
)

const mi = 1 << 20

func u(v uint64) *uint64 { return &v }

func TestParseThresholds(t *testing.T) {
	tests := []struct {
		name                string
		hard, soft, grace   map[string]string
		minReclaim          map[string]string
		want                []string // Threshold.String()
		wantErr             string
		wantMinReclaimOnSig Signal
	}{
		{
			name: "upstream defaults",
			hard: map[string]string{"memory.available": "100Mi", "nodefs.available": "10%", "imagefs.available": "15%", "nodefs.inodesFree": "5%", "imagefs.inodesFree": "5%"},
			want: []string{"imagefs.available<15%", "imagefs.inodesFree<5%", "memory.available<100Mi", "nodefs.available<10%", "nodefs.inodesFree<5%"},
		},
		{
			name: "every signal",
			hard: map[string]string{
				"allocatableMemory.available": "1Gi", "containerfs.available": "1Gi", "containerfs.inodesFree": "1000",
				"pid.available": "10%",
			},
			want: []string{"allocatableMemory.available<1Gi", "containerfs.available<1Gi", "containerfs.inodesFree<1k", "pid.available<10%"},
		},
		{
			name: "0% and 100% disable",
			hard: map[string]string{"memory.available": "0%", "nodefs.available": "100%", "imagefs.available": "15%"},
			want: []string{"imagefs.available<15%"},
		},
		{
			name:  "soft with grace",
			soft:  map[string]string{"memory.available": "300Mi"},
			grace: map[string]string{"memory.available": "1m30s"},
			want:  []string{"memory.available<300Mi (soft, grace 1m30s)"},
		},
		{
			name:  "a disabled soft threshold still needs a valid grace period",
			soft:  map[string]string{"memory.available": "0%"},
			grace: map[string]string{"memory.available": "1m"},
		},
		{name: "soft without grace", soft: map[string]string{"nodefs.available": "20%"}, wantErr: "evictionSoft[nodefs.available] has no grace period"},
		{name: "grace of an unknown signal", grace: map[string]string{"bogus": "1m"}, wantErr: `evictionSoftGracePeriod[bogus]: unknown eviction signal "bogus"`},
		{name: "grace without its soft threshold is still checked", grace: map[string]string{"memory.available": "-1s"}, wantErr: "evictionSoftGracePeriod[memory.available]"},
		{name: "unknown hard signal", hard: map[string]string{"memory.free": "1Gi"}, wantErr: `evictionHard[memory.free]: unknown eviction signal "memory.free"`},
		{name: "unknown soft signal", soft: map[string]string{"bogus": "1Gi"}, grace: map[string]string{"bogus": "1m"}, wantErr: `unknown eviction signal "bogus"`},
		{name: "the flag form is not the file's", hard: map[string]string{"memory.available": "<1Gi"}, wantErr: `evictionHard[memory.available]: invalid quantity "<1Gi"`},
		{name: "bad percentage", hard: map[string]string{"memory.available": "150%"}, wantErr: "within 0%-100%"},
		{name: "bad grace", soft: map[string]string{"memory.available": "1Gi"}, grace: map[string]string{"memory.available": "soon"}, wantErr: "evictionSoftGracePeriod[memory.available]"},
		{name: "unknown min reclaim", hard: map[string]string{"memory.available": "1Gi"}, minReclaim: map[string]string{"x": "1Gi"}, wantErr: "evictionMinimumReclaim[x]"},
		{
			name:                "min reclaim attached",
			hard:                map[string]string{"nodefs.available": "1Gi"},
			minReclaim:          map[string]string{"nodefs.available": "500Mi"},
			want:                []string{"nodefs.available<1Gi"},
			wantMinReclaimOnSig: SignalNodeFsAvailable,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseThresholds(tc.hard, tc.soft, tc.grace, tc.minReclaim)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var s []string
			for _, th := range got {
				s = append(s, th.String())
				if th.Signal == tc.wantMinReclaimOnSig && (th.MinReclaim == nil || th.MinReclaim.String() != "500Mi") {
					t.Errorf("%s: MinReclaim = %v, want 500Mi", th.Signal, th.MinReclaim)
				}
			}
			if strings.Join(s, ",") != strings.Join(tc.want, ",") {
				t.Errorf("got %v, want %v", s, tc.want)
			}
		})
	}
}

func mustParse(t *testing.T, hard map[string]string) []Threshold {
	t.Helper()
	th, err := ParseThresholds(hard, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return th
}

func TestObserveEverySignal(t *testing.T) {
	full := Stats{
		MemoryCapacity: u(1000 * mi), MemoryWorkingSet: u(700 * mi),
		AllocatableMemory: u(800 * mi), PodsMemoryWorkingSet: u(900 * mi),
		NodeFs:      FsStats{CapacityBytes: u(100), AvailableBytes: u(30), Inodes: u(1000), InodesFree: u(10)},
		ImageFs:     &FsStats{CapacityBytes: u(200), AvailableBytes: u(20), Inodes: u(2000), InodesFree: u(20)},
		ContainerFs: &FsStats{CapacityBytes: u(300), AvailableBytes: u(60), Inodes: u(3000), InodesFree: u(30)},
		PIDMax:      u(4096), PIDCurrent: u(4000),
	}
	noImageFs := full
	noImageFs.ImageFs, noImageFs.ContainerFs = nil, nil
	imageFsOnly := full
	imageFsOnly.ContainerFs = nil
	tests := []struct {
		name  string
		stats Stats
		sig   Signal
		avail int64
		capa  int64
	}{
		{"memory = capacity - working set", full, SignalMemoryAvailable, 300 * mi, 1000 * mi},
		{"allocatable clamps at zero", full, SignalAllocatableMemoryAvailable, 0, 800 * mi},
		{"nodefs bytes", full, SignalNodeFsAvailable, 30, 100},
		{"nodefs inodes", full, SignalNodeFsInodesFree, 10, 1000},
		{"imagefs dedicated", full, SignalImageFsAvailable, 20, 200},
		{"imagefs inodes dedicated", full, SignalImageFsInodesFree, 20, 2000},
		{"containerfs split", full, SignalContainerFsAvailable, 60, 300},
		{"containerfs inodes split", full, SignalContainerFsInodesFree, 30, 3000},
		{"imagefs mirrors nodefs", noImageFs, SignalImageFsAvailable, 30, 100},
		{"containerfs mirrors nodefs", noImageFs, SignalContainerFsInodesFree, 10, 1000},
		{"containerfs mirrors imagefs", imageFsOnly, SignalContainerFsAvailable, 20, 200},
		{"pid", full, SignalPIDAvailable, 96, 4096},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o, ok := Observe(tc.stats)[tc.sig]
			if !ok {
				t.Fatalf("%s not observed", tc.sig)
			}
			if o.Available.Value() != tc.avail || o.Capacity.Value() != tc.capa {
				t.Errorf("%s = %d/%d, want %d/%d", tc.sig, o.Available.Value(), o.Capacity.Value(), tc.avail, tc.capa)
			}
		})
	}
	if _, ok := Observe(Stats{})[SignalMemoryAvailable]; ok {
		t.Error("memory.available observed without stats")
	}
}

func TestThresholdsMet(t *testing.T) {
	th, err := ParseThresholds(map[string]string{"memory.available": "100Mi", "nodefs.available": "10%"}, nil, nil,
		map[string]string{"memory.available": "50Mi"})
	if err != nil {
		t.Fatal(err)
	}
	obs := func(mem, fsAvail int64) Observations {
		return Observations{
			SignalMemoryAvailable: {Available: *resource.NewQuantity(mem, resource.BinarySI), Capacity: *resource.NewQuantity(1000*mi, resource.BinarySI)},
			SignalNodeFsAvailable: {Available: *resource.NewQuantity(fsAvail, resource.BinarySI), Capacity: *resource.NewQuantity(1000, resource.BinarySI)},
		}
	}
	tests := []struct {
		name       string
		obs        Observations
		minReclaim bool
		want       []Signal
	}{
		{"none", obs(500*mi, 500), false, nil},
		{"memory below", obs(99*mi, 500), false, []Signal{SignalMemoryAvailable}},
		{"exactly at threshold is not met", obs(100*mi, 100), false, nil},
		{"percentage of capacity", obs(500*mi, 99), false, []Signal{SignalNodeFsAvailable}},
		{"min reclaim keeps met", obs(120*mi, 500), true, []Signal{SignalMemoryAvailable}},
		{"min reclaim satisfied", obs(151*mi, 500), true, nil},
		{"unobserved signal", Observations{}, false, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got []Signal
			for _, m := range ThresholdsMet(th, tc.obs, tc.minReclaim) {
				got = append(got, m.Signal)
			}
			if len(got) != len(tc.want) || (len(got) > 0 && got[0] != tc.want[0]) {
				t.Errorf("met = %v, want %v", got, tc.want)
			}
		})
	}
}

func memObs(avail int64) Observations {
	return Observations{SignalMemoryAvailable: {Available: *resource.NewQuantity(avail, resource.BinarySI), Capacity: *resource.NewQuantity(1000*mi, resource.BinarySI)}}
}

func TestTrackerTransitionsAndGrace(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakeClock(start)
	th, err := ParseThresholds(map[string]string{"memory.available": "100Mi"}, map[string]string{"memory.available": "200Mi"},
		map[string]string{"memory.available": "1m"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	tr := NewTracker(clk, 0) // default 5m
	steps := []struct {
		advance    time.Duration
		avail      int64
		wantCond   bool
		wantActive int // active thresholds
	}{
		{0, 500 * mi, false, 0},
		{10 * time.Second, 150 * mi, true, 0},  // soft met, grace not elapsed; condition set anyway
		{50 * time.Second, 150 * mi, true, 0},  // 50s into the grace period
		{10 * time.Second, 150 * mi, true, 1},  // 60s: soft active
		{10 * time.Second, 50 * mi, true, 2},   // hard too, immediately
		{10 * time.Second, 500 * mi, true, 0},  // relieved: condition stays (anti-flap)
		{4 * time.Minute, 500 * mi, true, 0},   // 4m10s since last observed
		{50 * time.Second, 500 * mi, false, 0}, // 5m after: cleared
		{10 * time.Second, 150 * mi, true, 0},  // met again: grace restarts from now
		{59 * time.Second, 150 * mi, true, 0},
		{1 * time.Second, 150 * mi, true, 1},
	}
	for i, s := range steps {
		clk.Step(s.advance)
		r := tr.Update(th, memObs(s.avail))
		has := len(r.Conditions) == 1 && r.Conditions[0] == v1.NodeMemoryPressure
		if has != s.wantCond {
			t.Errorf("step %d (t=%s): MemoryPressure = %v, want %v (conditions %v)", i, clk.Since(start), has, s.wantCond, r.Conditions)
		}
		if len(r.Active) != s.wantActive {
			t.Errorf("step %d (t=%s): %d active thresholds %v, want %d", i, clk.Since(start), len(r.Active), r.Active, s.wantActive)
		}
	}
}

func TestTrackerMinReclaimHysteresis(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	th, err := ParseThresholds(map[string]string{"memory.available": "100Mi"}, nil, nil, map[string]string{"memory.available": "100Mi"})
	if err != nil {
		t.Fatal(err)
	}
	tr := NewTracker(clk, time.Minute)
	for i, s := range []struct {
		avail int64
		met   bool
	}{{150 * mi, false}, {90 * mi, true}, {150 * mi, true}, {210 * mi, false}, {150 * mi, false}} {
		r := tr.Update(th, memObs(s.avail))
		if (len(r.Met) == 1) != s.met {
			t.Errorf("step %d avail %dMi: met=%v want %v", i, s.avail/mi, r.Met, s.met)
		}
	}
}

func TestTaints(t *testing.T) {
	got := Taints([]v1.NodeConditionType{v1.NodePIDPressure, v1.NodeMemoryPressure, v1.NodeDiskPressure})
	want := []string{TaintNodeMemoryPressure, TaintNodeDiskPressure, TaintNodePIDPressure}
	if len(got) != 3 {
		t.Fatalf("taints = %v", got)
	}
	for i := range got {
		if got[i].Key != want[i] || got[i].Effect != v1.TaintEffectNoSchedule {
			t.Errorf("taint %d = %v, want %s:NoSchedule", i, got[i], want[i])
		}
	}
	if len(Taints(nil)) != 0 {
		t.Error("taints without conditions")
	}
}

// --- pods ---

type podOpt func(*v1.Pod)

func prio(p int32) podOpt { return func(pod *v1.Pod) { pod.Spec.Priority = &p } }
func memReq(q string) podOpt {
	return func(pod *v1.Pod) {
		pod.Spec.Containers[0].Resources.Requests = v1.ResourceList{v1.ResourceMemory: resource.MustParse(q)}
	}
}
func diskReq(q string) podOpt {
	return func(pod *v1.Pod) {
		pod.Spec.Containers[0].Resources.Requests = v1.ResourceList{v1.ResourceEphemeralStorage: resource.MustParse(q)}
	}
}
func static() podOpt {
	return func(pod *v1.Pod) {
		pod.Annotations = map[string]string{podutil.AnnotationConfigSource: podutil.SourceFile}
	}
}

func newPod(name string, opts ...podOpt) *v1.Pod {
	p := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name)},
		Spec:       v1.PodSpec{Containers: []v1.Container{{Name: "app"}}},
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

func memStats(p *v1.Pod, ws uint64) PodStats {
	return PodStats{Pod: p, MemoryWorkingSet: u(ws), Containers: []ContainerStats{{Name: "app", MemoryWorkingSet: u(ws)}}}
}

func names(cs []Candidate) string {
	var s []string
	for _, c := range cs {
		s = append(s, c.Pod.Name)
	}
	return strings.Join(s, ",")
}

func TestRankForMemory(t *testing.T) {
	be := newPod("besteffort")
	burstOver := newPod("burst-over", memReq("100Mi"))
	burstUnder := newPod("burst-under", memReq("500Mi"))
	hiPrioOver := newPod("hiprio-over", memReq("100Mi"), prio(1000))
	bigOver := newPod("big-over", memReq("100Mi"))
	crit := newPod("critical", prio(podutil.SystemCriticalPriority))
	st := newPod("static", static())
	nostats := newPod("nostats", memReq("1Gi"))
	stats := Stats{Pods: []PodStats{
		memStats(be, 50*mi), memStats(burstOver, 200*mi), memStats(burstUnder, 300*mi),
		memStats(hiPrioOver, 900*mi), memStats(bigOver, 400*mi), memStats(crit, 2000*mi), memStats(st, 2000*mi),
	}}
	tests := []struct {
		name string
		pods []*v1.Pod
		want string
	}{
		{"exceeds request before within", []*v1.Pod{burstUnder, burstOver}, "burst-over,burst-under"},
		{"best effort always exceeds", []*v1.Pod{burstUnder, be}, "besteffort,burst-under"},
		{"priority before usage", []*v1.Pod{hiPrioOver, burstOver}, "burst-over,hiprio-over"},
		{"more above request first", []*v1.Pod{burstOver, bigOver, be}, "big-over,burst-over,besteffort"},
		{"critical and static last", []*v1.Pod{crit, st, burstUnder}, "burst-under,static,critical"},
		{"no stats first", []*v1.Pod{burstOver, nostats}, "nostats,burst-over"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := RankForMemory(tc.pods, stats)
			if names(got) != tc.want {
				t.Errorf("ranking %s, want %s", names(got), tc.want)
			}
			for _, c := range got {
				if c.Why == "" {
					t.Errorf("%s has no why", c.Pod.Name)
				}
			}
		})
	}
	got := RankForMemory([]*v1.Pod{burstOver, burstUnder}, stats)
	if w := got[0].Why; w != "memory usage 200Mi exceeds request 100Mi; priority 0; 100Mi above request" {
		t.Errorf("why = %q", w)
	}
	if w := got[1].Why; w != "memory usage 300Mi within request 500Mi; priority 0; 200Mi below request" {
		t.Errorf("why = %q", w)
	}
}

func diskStats(p *v1.Pod, root, logs, vol uint64) PodStats {
	return PodStats{Pod: p, LocalVolumeUsedBytes: u(vol), LocalVolumeInodes: u(vol / 10),
		Containers: []ContainerStats{{Name: "app", RootfsUsedBytes: u(root), LogsUsedBytes: u(logs), RootfsInodes: u(root / 10), LogsInodes: u(logs / 10)}}}
}

func TestRankForDisk(t *testing.T) {
	rootHeavy := newPod("root-heavy", diskReq("100"))
	volHeavy := newPod("vol-heavy", diskReq("100"))
	requested := newPod("requested", diskReq("10000"))
	lowPrio := newPod("low-prio", prio(-5), diskReq("100"))
	base := []PodStats{diskStats(rootHeavy, 5000, 10, 10), diskStats(volHeavy, 10, 10, 3000), diskStats(requested, 6000, 0, 0), diskStats(lowPrio, 200, 0, 0)}
	shared := Stats{Pods: base}
	dedicated := Stats{Pods: base, ImageFs: &FsStats{}}
	pods := []*v1.Pod{requested, volHeavy, rootHeavy}
	tests := []struct {
		name  string
		sig   Signal
		stats Stats
		pods  []*v1.Pod
		want  string
	}{
		{"shared nodefs counts everything", SignalNodeFsAvailable, shared, pods, "root-heavy,vol-heavy,requested"},
		{"dedicated imagefs: nodefs counts logs and volumes", SignalNodeFsAvailable, dedicated, pods, "vol-heavy,root-heavy,requested"},
		{"dedicated imagefs: imagefs counts writable layers", SignalImageFsAvailable, dedicated, pods, "root-heavy,vol-heavy,requested"},
		{"priority before usage", SignalNodeFsAvailable, shared, []*v1.Pod{rootHeavy, lowPrio}, "low-prio,root-heavy"},
		{"inodes: no request, by usage", SignalNodeFsInodesFree, shared, pods, "requested,root-heavy,vol-heavy"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := names(RankForDisk(tc.sig, tc.pods, tc.stats)); got != tc.want {
				t.Errorf("ranking %s, want %s", got, tc.want)
			}
		})
	}
}

func TestRankForPID(t *testing.T) {
	a := newPod("a", prio(10))
	b := newPod("b")
	c := newPod("c")
	crit := newPod("crit", prio(podutil.SystemCriticalPriority+1))
	stats := Stats{Pods: []PodStats{{Pod: a, Processes: u(900)}, {Pod: b, Processes: u(5)}, {Pod: c, Processes: u(50)}, {Pod: crit, Processes: u(5000)}}}
	if got := names(RankForPID([]*v1.Pod{crit, a, b, c}, stats)); got != "c,b,a,crit" {
		t.Errorf("ranking %s, want c,b,a,crit", got)
	}
}

func TestReclaimFor(t *testing.T) {
	shared := Stats{}
	dedicated := Stats{ImageFs: &FsStats{}}
	split := Stats{ImageFs: &FsStats{}, ContainerFs: &FsStats{}}
	tests := []struct {
		sig   Signal
		stats Stats
		want  string
	}{
		{SignalMemoryAvailable, shared, ""},
		{SignalPIDAvailable, shared, ""},
		{SignalNodeFsAvailable, shared, "containerGC, imageGC"},
		{SignalNodeFsInodesFree, shared, "containerGC, imageGC"},
		{SignalNodeFsAvailable, dedicated, ""},
		{SignalImageFsAvailable, dedicated, "containerGC, imageGC"},
		{SignalImageFsInodesFree, dedicated, "containerGC, imageGC"},
		{SignalContainerFsAvailable, split, "containerGC"},
		{SignalImageFsAvailable, split, "containerGC, imageGC"},
	}
	for _, tc := range tests {
		if got := joinKinds(ReclaimFor(tc.sig, tc.stats)); got != tc.want {
			t.Errorf("ReclaimFor(%s, imagefs=%v split=%v) = %q, want %q", tc.sig, tc.stats.HasDedicatedImageFs(), tc.stats.SplitContainerFs(), got, tc.want)
		}
	}
}

func TestDecide(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	hardMem := mustParse(t, map[string]string{"memory.available": "100Mi"})
	hardFs := mustParse(t, map[string]string{"nodefs.available": "10%"})
	softMem, err := ParseThresholds(nil, map[string]string{"memory.available": "100Mi"}, map[string]string{"memory.available": "1m"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	guaranteed := newPod("guaranteed", memReq("300Mi"))
	app := newPod("app", memReq("100Mi"))
	crit := newPod("crit", static())
	tgp := int64(60)
	app.Spec.TerminationGracePeriodSeconds = &tgp
	stats := Stats{Pods: []PodStats{memStats(guaranteed, 250*mi), memStats(app, 200*mi), memStats(crit, 5000*mi)}}
	fsObs := Observations{SignalNodeFsAvailable: {Available: *resource.NewQuantity(5, resource.BinarySI), Capacity: *resource.NewQuantity(100, resource.BinarySI)}}

	t.Run("nothing met", func(t *testing.T) {
		if d := Decide(DecideInput{}); d.Threshold != nil || d.Victim != nil {
			t.Errorf("decision %+v", d)
		}
	})
	t.Run("hard memory evicts the top pod with grace 1s", func(t *testing.T) {
		d := Decide(DecideInput{Active: hardMem, Observations: memObs(50 * mi), Stats: stats, Pods: []*v1.Pod{crit, guaranteed, app}, Now: now})
		if d.Victim == nil || d.Victim.Pod.Name != "app" {
			t.Fatalf("victim = %v, want app; %s", d.Victim, d.Explanation)
		}
		if d.GracePeriodSeconds != 1 || len(d.Reclaim) != 0 {
			t.Errorf("grace %d reclaim %v", d.GracePeriodSeconds, d.Reclaim)
		}
		wantMsg := "The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi. Container app was using 200Mi, request is 100Mi, has larger consumption of memory."
		if d.Status.Message != wantMsg {
			t.Errorf("message\n got %q\nwant %q", d.Status.Message, wantMsg)
		}
		if d.Status.Phase != v1.PodFailed || d.Status.Reason != "Evicted" {
			t.Errorf("status %+v", d.Status)
		}
		if len(d.Status.Conditions) != 1 || d.Status.Conditions[0].Type != v1.DisruptionTarget ||
			d.Status.Conditions[0].Reason != "TerminationByKubelet" || !d.Status.Conditions[0].LastTransitionTime.Time.Equal(now) {
			t.Errorf("conditions %+v", d.Status.Conditions)
		}
		if d.EventAnnotations[AnnotationStarvedResource] != "memory" || d.EventAnnotations[AnnotationOffendingContainers] != "app" ||
			d.EventAnnotations[AnnotationOffendingContainersUsage] != "200Mi" {
			t.Errorf("annotations %v", d.EventAnnotations)
		}
		for _, want := range []string{"signal memory.available observed 50Mi, threshold 100Mi (hard)", "1. default/app: memory usage 200Mi exceeds request 100Mi",
			"2. default/guaranteed", "3. default/crit: critical pod", "evicting default/app (grace 1s)"} {
			if !strings.Contains(d.Explanation, want) {
				t.Errorf("explanation lacks %q:\n%s", want, d.Explanation)
			}
		}
	})
	t.Run("soft caps grace at evictionMaxPodGracePeriod", func(t *testing.T) {
		d := Decide(DecideInput{Active: softMem, Observations: memObs(50 * mi), Stats: stats, Pods: []*v1.Pod{app}, MaxPodGracePeriodSeconds: 30})
		if d.Victim == nil || d.GracePeriodSeconds != 30 {
			t.Errorf("victim %v grace %d, want app 30", d.Victim, d.GracePeriodSeconds)
		}
		d = Decide(DecideInput{Active: softMem, Observations: memObs(50 * mi), Stats: stats, Pods: []*v1.Pod{app}, MaxPodGracePeriodSeconds: 90})
		if d.GracePeriodSeconds != 60 {
			t.Errorf("grace %d, want the pod's own 60", d.GracePeriodSeconds)
		}
	})
	t.Run("only critical pods: no victim", func(t *testing.T) {
		d := Decide(DecideInput{Active: hardMem, Observations: memObs(50 * mi), Stats: stats, Pods: []*v1.Pod{crit}})
		if d.Victim != nil || !strings.Contains(d.Explanation, "no evictable pod") {
			t.Errorf("victim %v, explanation %s", d.Victim, d.Explanation)
		}
	})
	t.Run("disk asks for reclaim first, then evicts", func(t *testing.T) {
		in := DecideInput{Active: hardFs, Observations: fsObs, Stats: Stats{Pods: []PodStats{diskStats(app, 500, 0, 0)}}, Pods: []*v1.Pod{app}}
		d := Decide(in)
		if d.Victim != nil || joinKinds(d.Reclaim) != "containerGC, imageGC" {
			t.Fatalf("first decision: victim %v reclaim %v", d.Victim, d.Reclaim)
		}
		in.ReclaimAttempted = true
		d = Decide(in)
		if d.Victim == nil || d.Victim.Pod.Name != "app" || len(d.Reclaim) != 0 {
			t.Fatalf("after reclaim: victim %v reclaim %v", d.Victim, d.Reclaim)
		}
		want := "The node was low on resource: ephemeral-storage. Threshold quantity: 10, available: 5. Container app was using 500, request is 0, has larger consumption of ephemeral-storage."
		if d.Status.Message != want {
			t.Errorf("message\n got %q\nwant %q", d.Status.Message, want)
		}
	})
	t.Run("memory acted on before disk", func(t *testing.T) {
		obs := memObs(50 * mi)
		obs[SignalNodeFsAvailable] = fsObs[SignalNodeFsAvailable]
		d := Decide(DecideInput{Active: append(append([]Threshold{}, hardFs...), hardMem...), Observations: obs, Stats: stats, Pods: []*v1.Pod{app}})
		if d.Threshold == nil || d.Threshold.Signal != SignalMemoryAvailable {
			t.Errorf("threshold %v, want memory.available", d.Threshold)
		}
	})
}

func TestAdmit(t *testing.T) {
	be := newPod("be")
	burst := newPod("burst", memReq("10Mi"))
	tolerating := newPod("tol")
	tolerating.Spec.Tolerations = []v1.Toleration{{Key: TaintNodeMemoryPressure, Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoSchedule}}
	crit := newPod("crit", prio(podutil.SystemCriticalPriority))
	mem := []v1.NodeConditionType{v1.NodeMemoryPressure}
	disk := []v1.NodeConditionType{v1.NodeDiskPressure}
	tests := []struct {
		name  string
		pod   *v1.Pod
		conds []v1.NodeConditionType
		admit bool
		msg   string
	}{
		{"no pressure", be, nil, true, ""},
		{"memory pressure refuses best effort", be, mem, false, "The node had condition: [MemoryPressure]. "},
		{"memory pressure admits burstable", burst, mem, true, ""},
		{"memory pressure admits tolerating best effort", tolerating, mem, true, ""},
		{"disk pressure refuses all", burst, disk, false, "The node had condition: [DiskPressure]. "},
		{"memory and pid refuse burstable", burst, []v1.NodeConditionType{v1.NodeMemoryPressure, v1.NodePIDPressure}, false, "The node had condition: [MemoryPressure PIDPressure]. "},
		{"critical always admitted", crit, disk, true, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := Admit(tc.pod, tc.conds)
			if r.Admit != tc.admit || r.Message != tc.msg || (!r.Admit && r.Reason != "Evicted") {
				t.Errorf("Admit = %+v, want admit=%v msg=%q", r, tc.admit, tc.msg)
			}
		})
	}
}

func TestTrackerIgnoresStaleStats(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0())
	th := mustParse(t, map[string]string{"memory.available": "100Mi"})
	tr := NewTracker(clk, time.Minute)
	obsAt := func(ts time.Time) Observations {
		o := memObs(50 * mi)
		m := o[SignalMemoryAvailable]
		m.Time = ts
		o[SignalMemoryAvailable] = m
		return o
	}
	steps := []struct {
		statsTime  time.Time
		wantActive bool
	}{
		{t0(), true},
		{t0(), false},                      // same stats as last cycle: do not act again
		{t0().Add(10 * time.Second), true}, // fresh stats
		{time.Time{}, true},                // no timestamp: always fresh
	}
	for i, s := range steps {
		clk.Step(10 * time.Second)
		r := tr.Update(th, obsAt(s.statsTime))
		if (len(r.Active) == 1) != s.wantActive || len(r.Conditions) != 1 {
			t.Errorf("step %d: active %v conditions %v, want active=%v", i, r.Active, r.Conditions, s.wantActive)
		}
	}
}

func t0() time.Time { return time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) }

func TestWithAllocatableThresholds(t *testing.T) {
	got := WithAllocatableThresholds(mustParse(t, map[string]string{"memory.available": "100Mi", "nodefs.available": "10%"}))
	var s []string
	for _, th := range got {
		s = append(s, th.String())
	}
	if want := "memory.available<100Mi,nodefs.available<10%,allocatableMemory.available<100Mi"; strings.Join(s, ",") != want {
		t.Errorf("got %v, want %s", s, want)
	}
	explicit := mustParse(t, map[string]string{"memory.available": "100Mi", "allocatableMemory.available": "1Gi"})
	if got := WithAllocatableThresholds(explicit); len(got) != 2 {
		t.Errorf("explicit allocatable threshold duplicated: %v", got)
	}
}
