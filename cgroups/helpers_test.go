package cgroups

import (
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

const gi = int64(1) << 30

// res builds requirements from "cpu", "memory" quantity strings; "" leaves one out.
func res(reqCPU, reqMem, limCPU, limMem string) v1.ResourceRequirements {
	r := v1.ResourceRequirements{}
	set := func(l *v1.ResourceList, n v1.ResourceName, v string) {
		if v == "" {
			return
		}
		if *l == nil {
			*l = v1.ResourceList{}
		}
		(*l)[n] = resource.MustParse(v)
	}
	set(&r.Requests, v1.ResourceCPU, reqCPU)
	set(&r.Requests, v1.ResourceMemory, reqMem)
	set(&r.Limits, v1.ResourceCPU, limCPU)
	set(&r.Limits, v1.ResourceMemory, limMem)
	return r
}

func podWith(uid string, rs ...v1.ResourceRequirements) *v1.Pod {
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: types.UID(uid)}}
	for i, r := range rs {
		p.Spec.Containers = append(p.Spec.Containers, v1.Container{Name: string(rune('a' + i)), Resources: r})
	}
	return p
}

var (
	guaranteedRes = res("500m", "1Gi", "500m", "1Gi")
	burstableRes  = res("250m", "512Mi", "1", "1Gi")
	bestEffortRes = res("", "", "", "")
)
