package csi

import "testing"

// The layout drivers (sha256sum of the handle as in `echo -n vol-1 | sha256sum`) deployed for the upstream kubelet expect.
func TestPaths(t *testing.T) {
	const root = "/var/lib/kubelet"
	for _, c := range []struct{ got, want string }{
		{StagingPath(root, "hostpath.csi.k8s.io", "vol-1"),
			"/var/lib/kubelet/plugins/kubernetes.io/csi/hostpath.csi.k8s.io/d2e8363faaac7ae76def3b14091d8eb5755f6b92e9531627aeec833a8731cc49/globalmount"},
		{PublishPath(root, "uid-1", "pvc-1"), "/var/lib/kubelet/pods/uid-1/volumes/kubernetes.io~csi/pvc-1/mount"},
		{UniqueVolumeName("d", "h"), "kubernetes.io/csi/d^h"},
		{BlockStagingPath(root, "pv-1"), "/var/lib/kubelet/plugins/kubernetes.io/csi/volumeDevices/staging/pv-1"},
		{BlockPublishPath(root, "pv-1", "uid-1"), "/var/lib/kubelet/plugins/kubernetes.io/csi/volumeDevices/publish/pv-1/uid-1"},
		{BlockDataDir(root, "pv-1"), "/var/lib/kubelet/plugins/kubernetes.io/csi/volumeDevices/pv-1/data"},
		{BlockGlobalMapPath(root, "pv-1"), "/var/lib/kubelet/plugins/kubernetes.io/csi/volumeDevices/pv-1/dev"},
		{PodDeviceDir(root, "uid-1"), "/var/lib/kubelet/pods/uid-1/volumeDevices/kubernetes.io~csi"},
	} {
		if c.got != c.want {
			t.Errorf("got %s, want %s", c.got, c.want)
		}
	}
}
