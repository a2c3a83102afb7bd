package volumes

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/csi"
)

func TestMetricsKindOf(t *testing.T) {
	pvc := v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "c"}}
	eph := v1.VolumeSource{Ephemeral: &v1.EphemeralVolumeSource{}}
	const pods = "/r/pods/u/volumes/"
	tests := []struct {
		name string
		src  v1.VolumeSource
		path string
		want MetricsKind
	}{
		{"emptyDir", v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}, pods + pluginEmptyDir + "/v", MetricsDu},
		{"configMap", v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{}}, pods + pluginConfigMap + "/v", MetricsDu},
		{"secret", v1.VolumeSource{Secret: &v1.SecretVolumeSource{}}, pods + pluginSecret + "/v", MetricsDu},
		{"projected", v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{}}, pods + pluginProjected + "/v", MetricsDu},
		{"downwardAPI", v1.VolumeSource{DownwardAPI: &v1.DownwardAPIVolumeSource{}}, pods + pluginDownwardAPI + "/v", MetricsDu},
		{"inline csi", v1.VolumeSource{CSI: &v1.CSIVolumeSource{Driver: "d"}}, pods + csi.PodPluginDir + "/v/mount", MetricsCSI},
		{"hostPath", v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: "/x"}}, "", MetricsNone},
		{"image", v1.VolumeSource{Image: &v1.ImageVolumeSource{Reference: "i"}}, "", MetricsNone},
		{"claim of a local PV", pvc, pods + pluginLocalVolume + "/pv", MetricsStatfs},
		{"claim of a CSI PV", pvc, pods + csi.PodPluginDir + "/pv/mount", MetricsCSI},
		{"generic ephemeral of a CSI PV", eph, pods + csi.PodPluginDir + "/pv/mount", MetricsCSI},
		{"claim of a hostPath PV", pvc, "/srv/data", MetricsNone},
		{"claim of a hostPath PV ending in mount", pvc, "/srv/mount", MetricsNone},
		{"claim not mounted", pvc, "", MetricsNone},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := metricsKindOf(&tt.src, tt.path); got != tt.want {
				t.Errorf("metricsKindOf(%s) = %v, want %v", tt.path, got, tt.want)
			}
		})
	}
}

// TestMountedVolumes: the pod's volumes with their paths and how to measure them; claims
// only once set up (by their PV's directory), CSI ones with the driver and handle of their
// vol_data.json, nothing for hostPath.
func TestMountedVolumes(t *testing.T) {
	root := t.TempDir()
	m := NewManager(root, nil, clocktesting.NewFakeClock(time.Unix(0, 0)))
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "uid"}, Spec: v1.PodSpec{Volumes: []v1.Volume{
		{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
		{Name: "host", VolumeSource: v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: "/srv"}}},
		{Name: "local", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "local-claim"}}},
		{Name: "data", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "csi-claim"}}},
		{Name: "disk", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "block-claim"}}},
		{Name: "pending", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "unbound"}}},
		{Name: "unpublished", VolumeSource: v1.VolumeSource{CSI: &v1.CSIVolumeSource{Driver: "d"}}},
		{Name: "../../../etc", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
	}}}
	if got := m.MountedVolumes(pod); len(got) != 1 || got[0].Name != "scratch" {
		t.Fatalf("before any set-up: %+v, want only the emptyDir (by the spec)", got)
	}
	localPath := filepath.Join(root, "pods/uid/volumes", pluginLocalVolume, "pv-local")
	csiPath := csi.PublishPath(root, "uid", "pv-csi")
	if err := os.MkdirAll(csiPath, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := writeVolData(filepath.Dir(csiPath), volData{volDataDriver: "d", volDataHandle: "h1", volDataSpecVolID: "pv-csi"}); err != nil {
		t.Fatal(err)
	}
	st := m.state(pod.UID)
	st.claims["local"] = HostVolume{Path: localPath}
	st.claims["data"] = HostVolume{Path: csiPath}
	// A block volume has no filesystem to measure.
	st.claims["disk"] = HostVolume{Path: filepath.Join(root, "pods/uid/volumeDevices", pluginLocalVolume, "pv-blk"), Device: true}

	want := []MountedVolume{
		{Name: "scratch", Kind: MetricsDu, Path: filepath.Join(root, "pods/uid/volumes", pluginEmptyDir, "scratch")},
		{Name: "local", Kind: MetricsStatfs, Path: localPath, Claim: "local-claim"},
		{Name: "data", Kind: MetricsCSI, Path: csiPath, Claim: "csi-claim", CSIDriver: "d", CSIHandle: "h1"},
	}
	if got := m.MountedVolumes(pod); !reflect.DeepEqual(got, want) {
		t.Errorf("MountedVolumes =\n%+v\nwant\n%+v", got, want)
	}
}
