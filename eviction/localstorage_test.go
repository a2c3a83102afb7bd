package eviction

import (
	"fmt"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func emptyDir(name, medium, sizeLimit string) podOpt {
	return func(p *v1.Pod) {
		ed := &v1.EmptyDirVolumeSource{Medium: v1.StorageMedium(medium)}
		if sizeLimit != "" {
			q := resource.MustParse(sizeLimit)
			ed.SizeLimit = &q
		}
		p.Spec.Volumes = append(p.Spec.Volumes, v1.Volume{Name: name, VolumeSource: v1.VolumeSource{EmptyDir: ed}})
	}
}

// containers replaces the pod's containers with ones named "name=limit" ("name" alone: no limit).
func containers(specs ...string) podOpt {
	return func(p *v1.Pod) {
		p.Spec.Containers = nil
		for _, s := range specs {
			name, limit, ok := strings.Cut(s, "=")
			c := v1.Container{Name: name}
			if ok {
				c.Resources.Limits = v1.ResourceList{v1.ResourceEphemeralStorage: resource.MustParse(limit)}
			}
			p.Spec.Containers = append(p.Spec.Containers, c)
		}
	}
}

// storageStats is a pod's stats: total ephemeral usage, volumes ("name=bytes") and
// containers' rootfs/logs ("name=rootfs/logs").
func storageStats(p *v1.Pod, total uint64, vols []string, ctrs ...string) PodStats {
	ps := PodStats{Pod: p, EphemeralStorageUsedBytes: u(total)}
	parse := func(s string) uint64 {
		var v uint64
		if _, err := fmt.Sscan(s, &v); err != nil {
			panic(err)
		}
		return v
	}
	for _, v := range vols {
		name, b, _ := strings.Cut(v, "=")
		ps.Volumes = append(ps.Volumes, VolumeStats{Name: name, UsedBytes: u(parse(b))})
	}
	for _, c := range ctrs {
		name, rest, _ := strings.Cut(c, "=")
		root, logs, _ := strings.Cut(rest, "/")
		ps.Containers = append(ps.Containers, ContainerStats{Name: name, RootfsUsedBytes: u(parse(root)), LogsUsedBytes: u(parse(logs))})
	}
	return ps
}

func TestDecideLocalStorage(t *testing.T) {
	const mib = 1 << 20
	type podWithStats struct {
		pod   *v1.Pod
		stats *PodStats // nil: no stats
	}
	with := func(p *v1.Pod, total uint64, vols []string, ctrs ...string) podWithStats {
		s := storageStats(p, total, vols, ctrs...)
		return podWithStats{pod: p, stats: &s}
	}
	n := func(v uint64) string { return fmt.Sprint(v) }
	tests := []struct {
		name      string
		off       bool
		dedicated bool // images on a filesystem of their own
		pods      []podWithStats
		// want lists "pod: signal: message" per evicted pod, in pod order.
		want []string
	}{
		{
			name: "emptyDir over its sizeLimit",
			pods: []podWithStats{with(newPod("p", emptyDir("data", "", "10Mi")), 31*mib, []string{"data=" + n(30*mib)}, "app=0/0")},
			want: []string{`p: emptydirfs.limit: Usage of EmptyDir volume "data" exceeds the limit "10Mi". `},
		},
		{
			name: "emptyDir at or under its sizeLimit, or without one",
			pods: []podWithStats{
				with(newPod("at", emptyDir("data", "", "10Mi")), 10*mib, []string{"data=" + n(10*mib)}),
				with(newPod("under", emptyDir("data", "", "10Mi")), 5*mib, []string{"data=" + n(5*mib)}),
				with(newPod("nolimit", emptyDir("data", "", "")), 900*mib, []string{"data=" + n(900*mib)}),
			},
		},
		{
			name: "memory-backed emptyDir skipped: its tmpfs is the limit",
			pods: []podWithStats{with(newPod("p", emptyDir("shm", "Memory", "10Mi")), 0, []string{"shm=" + n(30*mib)})},
		},
		{
			name: "units: 10M is 10^7 bytes, 10Mi is 2^20*10",
			pods: []podWithStats{
				with(newPod("decimal", emptyDir("data", "", "10M")), 10*mib, []string{"data=" + n(10*mib)}),
				with(newPod("binary", emptyDir("data", "", "10Mi")), 10*mib, []string{"data=" + n(10*mib)}),
			},
			want: []string{`decimal: emptydirfs.limit: Usage of EmptyDir volume "data" exceeds the limit "10M". `},
		},
		{
			name: "pod total over the sum of its containers' limits, each container within its own",
			pods: []podWithStats{with(newPod("p", containers("a=10Mi", "b=20Mi"), emptyDir("data", "", "")),
				31*mib, []string{"data=" + n(25*mib)}, "a=3145728/0", "b=3145728/0")},
			want: []string{"p: ephemeralpodfs.limit: Pod ephemeral local storage usage exceeds the total limit of containers 30Mi. "},
		},
		{
			name: "pod limit sums only the containers that set one",
			pods: []podWithStats{with(newPod("p", containers("a=10Mi", "unlimited")), 11*mib, nil, "a=0/0", "unlimited="+n(11*mib)+"/0")},
			want: []string{"p: ephemeralpodfs.limit: Pod ephemeral local storage usage exceeds the total limit of containers 10Mi. "},
		},
		{
			name: "pods without limits are skipped",
			pods: []podWithStats{with(newPod("p", emptyDir("data", "", "")), 900*mib, []string{"data=" + n(900*mib)}, "app="+n(900*mib)+"/"+n(mib))},
		},
		{
			name: "container over its own limit while the pod is within the sum",
			pods: []podWithStats{with(newPod("p", containers("small=10Mi", "big=100Mi")), 16*mib, nil, "small="+n(15*mib)+"/"+n(mib), "big=0/0")},
			want: []string{`p: ephemeralcontainerfs.limit: Container small exceeded its local ephemeral storage limit "10Mi". `},
		},
		{
			name:      "dedicated imagefs: the writable layer does not count for the container, its logs do",
			dedicated: true,
			pods: []podWithStats{
				with(newPod("rootfs", containers("small=10Mi", "big=100Mi")), 16*mib, nil, "small="+n(15*mib)+"/"+n(mib), "big=0/0"),
				with(newPod("logs", containers("small=10Mi", "big=100Mi")), 12*mib, nil, "small=0/"+n(12*mib), "big=0/0"),
			},
			want: []string{`logs: ephemeralcontainerfs.limit: Container small exceeded its local ephemeral storage limit "10Mi". `},
		},
		{
			name: "checked in upstream's order: emptyDir before the pod total before the container",
			pods: []podWithStats{with(newPod("p", containers("app=10Mi"), emptyDir("data", "", "5Mi")),
				50*mib, []string{"data=" + n(20*mib)}, "app="+n(30*mib)+"/0")},
			want: []string{`p: emptydirfs.limit: Usage of EmptyDir volume "data" exceeds the limit "5Mi". `},
		},
		{
			name: "every pod over a limit in one cycle; pods within theirs and pods without stats left alone",
			pods: []podWithStats{
				with(newPod("a", emptyDir("data", "", "10Mi")), 30*mib, []string{"data=" + n(30*mib)}),
				with(newPod("fine", containers("app=10Mi")), mib, nil, "app="+n(mib)+"/0"),
				with(newPod("b", containers("app=10Mi")), 20*mib, nil, "app="+n(20*mib)+"/0"),
				{pod: newPod("nostats", emptyDir("data", "", "1Ki"))},
				with(newPod("c", containers("x=1Gi", "app=10Mi")), 20*mib, nil, "x=0/0", "app="+n(20*mib)+"/0"),
			},
			want: []string{
				`a: emptydirfs.limit: Usage of EmptyDir volume "data" exceeds the limit "10Mi". `,
				"b: ephemeralpodfs.limit: Pod ephemeral local storage usage exceeds the total limit of containers 10Mi. ",
				`c: ephemeralcontainerfs.limit: Container app exceeded its local ephemeral storage limit "10Mi". `,
			},
		},
		{
			name: "localStorageCapacityIsolation off: nothing is checked",
			off:  true,
			pods: []podWithStats{with(newPod("p", emptyDir("data", "", "10Mi")), 30*mib, []string{"data=" + n(30*mib)})},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := LocalStorageInput{Isolation: !tt.off}
			if tt.dedicated {
				in.Stats.ImageFs = &FsStats{}
			}
			for _, p := range tt.pods {
				in.Pods = append(in.Pods, p.pod)
				if p.stats != nil {
					in.Stats.Pods = append(in.Stats.Pods, *p.stats)
				}
			}
			var got []string
			for _, v := range DecideLocalStorage(in) {
				got = append(got, fmt.Sprintf("%s: %s: %s", v.Pod.Name, v.Signal, v.Status.Message))
				if v.Status.Phase != v1.PodFailed || v.Status.Reason != "Evicted" || len(v.Status.Conditions) != 0 {
					t.Errorf("%s: status %+v, want Failed/Evicted without conditions (upstream adds no DisruptionTarget)", v.Pod.Name, v.Status)
				}
				if v.GracePeriodSeconds != 1 || v.Critical {
					t.Errorf("%s: grace %d critical %v, want 1s and not critical", v.Pod.Name, v.GracePeriodSeconds, v.Critical)
				}
				if v.Usage.Cmp(v.Limit) <= 0 {
					t.Errorf("%s: usage %s not above limit %s", v.Pod.Name, v.Usage.String(), v.Limit.String())
				}
			}
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("evicted:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}

// A critical pod over its limit is reported, so the manager can log it, but marked.
func TestDecideLocalStorageCriticalPod(t *testing.T) {
	p := newPod("static", static(), emptyDir("data", "", "1Mi"))
	vs := DecideLocalStorage(LocalStorageInput{Isolation: true, Pods: []*v1.Pod{p},
		Stats: Stats{Pods: []PodStats{storageStats(p, 2<<20, []string{"data=2097152"})}}})
	if len(vs) != 1 || !vs[0].Critical || vs[0].Name != "data" {
		t.Fatalf("violations = %+v, want the static pod marked critical", vs)
	}
}
