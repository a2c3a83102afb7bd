package podruntime

import (
	"fmt"
	"path/filepath"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/volumes"
)

// blockDevices turns a container's volumeDevices into CRI devices, as
// upstream's makeBlockVolumes: the host path is the pod's link to the block
// volume (the runtime resolves it), the container path the devicePath, and
// the permissions "mrw", or "r" for a read-only volume.
func blockDevices(c *v1.Container, vols map[string]volumes.HostVolume) ([]*runtimeapi.Device, error) {
	var out []*runtimeapi.Device
	for _, vd := range c.VolumeDevices {
		if !filepath.IsAbs(vd.DevicePath) {
			return nil, fmt.Errorf("error DevicePath `%s` must be an absolute path", vd.DevicePath)
		}
		hv, ok := vols[vd.Name]
		if !ok || !hv.Device {
			return nil, fmt.Errorf("cannot find volume %q to pass into container %q", vd.Name, c.Name)
		}
		perm := "mrw"
		if hv.ReadOnly {
			perm = "r"
		}
		out = append(out, &runtimeapi.Device{ContainerPath: vd.DevicePath, HostPath: hv.Path, Permissions: perm})
	}
	return out, nil
}
