package cgroups

import (
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodelet/nodelet/internal/resourcetest"
)

const gi = int64(1) << 30

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

var res = resourcetest.Requirements
