package nodeshutdown

import (
	"bytes"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func testPod(ns, name string, prio *int32, grace *int64) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + ns + "-" + name)},
		Spec:       v1.PodSpec{Priority: prio, TerminationGracePeriodSeconds: grace},
	}
}

func i32(v int32) *int32 { return &v }
func i64(v int64) *int64 { return &v }

type planSummary struct {
	prio  int32
	empty bool
	pods  []string // name=grace
}

func summarize(plan []PlannedGroup) []planSummary {
	var out []planSummary
	for _, g := range plan {
		s := planSummary{prio: g.Priority, empty: g.Empty}
		for _, p := range g.Pods {
			s.pods = append(s.pods, p.Pod.Name+"="+p.Grace.String())
		}
		out = append(out, s)
	}
	return out
}

func TestPlan(t *testing.T) {
	groups := []Group{
		{Priority: 0, GracePeriod: 20 * time.Second},
		{Priority: 1000, GracePeriod: 15 * time.Second},
		{Priority: 10000, GracePeriod: 40 * time.Second},
		{Priority: 2000000000, GracePeriod: 10 * time.Second},
	}
	tests := []struct {
		name   string
		groups []Group
		pods   []*v1.Pod
		want   []planSummary
	}{
		{
			name:   "grouping, capping and defaults",
			groups: groups,
			pods: []*v1.Pod{
				testPod("default", "nil-prio-default-grace", nil, nil),         // group 0, min(20s, 30s)
				testPod("default", "below-lowest", i32(-10), i64(5)),           // group 0, own 5s
				testPod("default", "at-1000", i32(1000), i64(60)),              // group 1000, capped 15s
				testPod("default", "between", i32(9999), i64(0)),               // group 1000, own 0s
				testPod("default", "high", i32(500000), nil),                   // group 10000, default 30s < 40s
				testPod("kube-system", "critical", i32(2000001000), i64(3600)), // top group, capped 10s
				testPod("default", "negative-grace", i32(10000), i64(-3)),      // group 10000, treated as 0s
			},
			want: []planSummary{
				{prio: 0, pods: []string{"below-lowest=5s", "nil-prio-default-grace=20s"}},
				{prio: 1000, pods: []string{"at-1000=15s", "between=0s"}},
				{prio: 10000, pods: []string{"high=30s", "negative-grace=0s"}},
				{prio: 2000000000, pods: []string{"critical=10s"}},
			},
		},
		{
			name:   "empty groups kept and marked",
			groups: groups,
			pods:   []*v1.Pod{testPod("a", "p", i32(1500), nil)},
			want: []planSummary{
				{prio: 0, empty: true},
				{prio: 1000, pods: []string{"p=15s"}},
				{prio: 10000, empty: true},
				{prio: 2000000000, empty: true},
			},
		},
		{
			name:   "pods sorted by namespace then name",
			groups: groups[:1],
			pods:   []*v1.Pod{testPod("b", "a", nil, i64(1)), testPod("a", "z", nil, i64(1)), testPod("a", "b", nil, i64(1))},
			want:   []planSummary{{prio: 0, pods: []string{"b=1s", "z=1s", "a=1s"}}},
		},
		{
			name:   "no groups: nothing planned",
			groups: nil,
			pods:   []*v1.Pod{testPod("a", "p", nil, nil)},
			want:   nil,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := summarize(Plan(tt.groups, tt.pods))
			if len(got) != len(tt.want) {
				t.Fatalf("Plan() = %+v, want %+v", got, tt.want)
			}
			for i := range got {
				if got[i].prio != tt.want[i].prio || got[i].empty != tt.want[i].empty || len(got[i].pods) != len(tt.want[i].pods) {
					t.Fatalf("group %d = %+v, want %+v", i, got[i], tt.want[i])
				}
				for j := range got[i].pods {
					if got[i].pods[j] != tt.want[i].pods[j] {
						t.Fatalf("group %d = %+v, want %+v", i, got[i], tt.want[i])
					}
				}
			}
		})
	}
}

func TestPlanDuration(t *testing.T) {
	plan := Plan([]Group{{0, 20 * time.Second}, {100, 5 * time.Second}, {200, 7 * time.Second}},
		[]*v1.Pod{testPod("a", "x", nil, nil), testPod("a", "y", i32(300), nil)})
	if got := PlanDuration(plan); got != 27*time.Second {
		t.Fatalf("PlanDuration = %s, want 27s (the empty 5s group costs nothing)", got)
	}
}

func TestFormatPlan(t *testing.T) {
	groups := []Group{{0, 20 * time.Second}, {1000, 5 * time.Second}, {2000000000, 10 * time.Second}}
	plan := Plan(groups, []*v1.Pod{
		testPod("default", "web", nil, nil),
		testPod("default", "batch", i32(-1), i64(3)),
		testPod("kube-system", "dns", i32(2000000000), i64(30)),
	})
	tests := []struct {
		name      string
		plan      []PlannedGroup
		logindMax time.Duration
		ok        bool
		want      string
	}{
		{
			name: "logind allows it", plan: plan, logindMax: 35 * time.Second, ok: true,
			want: `STEP  PRIORITY>=  GROUP GRACE  POD                                POD PRIORITY  POD GRACE
1     0           20s          default/batch                      -1            3s
                               default/web                        0             20s
2     1000        5s           (no pods: skipped, takes no time)                
3     2000000000  10s          kube-system/dns                    2000000000    10s
total grace (all groups): 35s
worst case for these pods: 30s
logind InhibitDelayMaxSec: 35s: OK
`,
		},
		{
			name: "logind too small", plan: plan, logindMax: 5 * time.Second, ok: true,
			want: `STEP  PRIORITY>=  GROUP GRACE  POD                                POD PRIORITY  POD GRACE
1     0           20s          default/batch                      -1            3s
                               default/web                        0             20s
2     1000        5s           (no pods: skipped, takes no time)                
3     2000000000  10s          kube-system/dns                    2000000000    10s
total grace (all groups): 35s
worst case for these pods: 30s
logind InhibitDelayMaxSec: 5s: TOO SMALL, logind will stop waiting after 5s of the 35s needed
`,
		},
		{
			name: "logind unknown", plan: plan[:1], ok: false,
			want: `STEP  PRIORITY>=  GROUP GRACE  POD            POD PRIORITY  POD GRACE
1     0           20s          default/batch  -1            3s
                               default/web    0             20s
total grace (all groups): 20s
worst case for these pods: 20s
logind InhibitDelayMaxSec: UNKNOWN: logind could not be asked; without it nodelet gets no time at shutdown
`,
		},
		{
			name: "feature off", plan: nil, ok: false,
			want: `STEP  PRIORITY>=  GROUP GRACE  POD                                                           POD PRIORITY  POD GRACE
-     -           -            (graceful node shutdown is off: no grace periods configured)                
total grace (all groups): 0s
worst case for these pods: 0s
logind InhibitDelayMaxSec: not needed
`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := FormatPlan(&buf, tt.plan, tt.logindMax, tt.ok); err != nil {
				t.Fatal(err)
			}
			if buf.String() != tt.want {
				t.Fatalf("FormatPlan output:\n%s\nwant:\n%s", buf.String(), tt.want)
			}
		})
	}
}
