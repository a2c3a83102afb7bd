package cgroups

import (
	"os"
	"testing"

	occgroups "github.com/opencontainers/cgroups"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodelet/nodelet/internal/testsupport/resourcetest"
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

// TestMain lets opencontainers/cgroups open files of the temp-dir trees the tests
// use: outside /sys/fs/cgroup it refuses any file not on a cgroup filesystem unless
// its TestMode is on (which also creates missing interface files, as fake trees need).
func TestMain(m *testing.M) {
	occgroups.TestMode = true
	os.Exit(m.Run())
}
