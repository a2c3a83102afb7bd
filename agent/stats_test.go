package agent

import (
	"testing"

	"github.com/nodelet/nodelet/cgroups"
)

// The Summary's system containers: kubeletCgroups, runtimeCgroups and
// systemCgroups when set, else nodelet's own cgroup.
func TestSummarySystemContainers(t *testing.T) {
	v1Self := "12:memory:/system.slice/nodelet.service\n4:cpu,cpuacct:/system.slice/nodelet.service\n0::/\n"
	for _, tc := range []struct {
		kubelet, runtime, system, self string
		mode                           cgroups.Mode
		want                           systemContainerCgroups
	}{
		{kubelet: "/nodelet.slice", runtime: "/system.slice/containerd.service", system: "/system.slice", mode: cgroups.ModeV2,
			want: systemContainerCgroups{kubelet: "/nodelet.slice", runtime: "/system.slice/containerd.service", misc: "/system.slice"}},
		{self: "0::/system.slice/nodelet.service\n", mode: cgroups.ModeV2, want: systemContainerCgroups{kubelet: "/system.slice/nodelet.service"}},
		{self: v1Self, mode: cgroups.ModeHybrid, want: systemContainerCgroups{kubelet: "/system.slice/nodelet.service"}},
	} {
		if got := summarySystemContainers(tc.kubelet, tc.runtime, tc.system, tc.self, tc.mode); got != tc.want {
			t.Errorf("%+v: got %+v, want %+v", tc, got, tc.want)
		}
	}
}
