package volumes

import (
	"path/filepath"

	v1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/csi"
)

// MetricsKind says how a volume's usage is measured, as upstream's volume
// plugins' metrics providers do.
type MetricsKind int

const (
	// MetricsNone: nothing to measure (hostPath, image volumes, hostPath PVs).
	MetricsNone MetricsKind = iota
	// MetricsDu: the directory's disk usage (emptyDir, configMap, secret,
	// projected, downwardAPI), with the capacity of its filesystem.
	MetricsDu
	// MetricsStatfs: the filesystem mounted at the path (local PVs).
	MetricsStatfs
	// MetricsCSI: the driver's NodeGetVolumeStats.
	MetricsCSI
)

// MountedVolume is one of a pod's volumes as set up on the host, for usage
// stats.
type MountedVolume struct {
	// Name is the pod's volume name.
	Name string
	Kind MetricsKind
	// Path is what is measured: the volume directory, the local PV's mount,
	// or the CSI publish path (NodeGetVolumeStats' volume_path).
	Path string
	// Claim is the PersistentVolumeClaim behind a persistentVolumeClaim or
	// generic ephemeral volume; "" for the others.
	Claim string
	// CSIDriver and CSIHandle, for MetricsCSI, from the vol_data.json beside
	// the publish path.
	CSIDriver, CSIHandle string
}

// MountedVolumes lists the pod's volumes this manager set up, with how to
// measure each. Claim volumes are those the last SetUpPod resolved (kept
// while their objects cannot be read); the others are named by the pod's
// spec and may not exist yet (the caller skips what it cannot measure).
func (m *Manager) MountedVolumes(pod *v1.Pod) []MountedVolume {
	m.mu.Lock()
	st := m.pods[pod.UID]
	m.mu.Unlock()
	claims := map[string]HostVolume{}
	if st != nil {
		st.mu.Lock()
		for k, v := range st.claims {
			claims[k] = v
		}
		st.mu.Unlock()
	}
	var out []MountedVolume
	for i := range pod.Spec.Volumes {
		vol := &pod.Spec.Volumes[i]
		mv := MountedVolume{Name: vol.Name}
		if c, ok := podClaim(pod, vol); ok {
			hv, ok := claims[vol.Name]
			if !ok {
				continue // not mounted (yet)
			}
			if hv.Device {
				continue // a block volume: no filesystem to measure (upstream's block metrics are not done)
			}
			mv.Claim, mv.Path = c.name, hv.Path
		} else {
			mv.Path = m.inlineVolumePath(pod, vol)
		}
		mv.Kind = metricsKindOf(&vol.VolumeSource, mv.Path)
		if mv.Kind == MetricsNone {
			continue
		}
		if mv.Kind == MetricsCSI {
			d, err := readVolData(filepath.Dir(mv.Path))
			if err != nil {
				continue // not published (yet), or torn down meanwhile
			}
			mv.CSIDriver, mv.CSIHandle = d[volDataDriver], d[volDataHandle]
		}
		out = append(out, mv)
	}
	return out
}

// inlineVolumePath is where an inline volume of the pod lives on the host; ""
// for volumes that have no directory of nodelet's (hostPath, image).
func (m *Manager) inlineVolumePath(pod *v1.Pod, vol *v1.Volume) string {
	if validateVolumeName(vol.Name) != nil {
		return "" // never set up: a name that would leave the pod's directory
	}
	plugin := payloadPluginDir(&vol.VolumeSource)
	switch src := &vol.VolumeSource; {
	case src.EmptyDir != nil:
		plugin = pluginEmptyDir
	case src.CSI != nil:
		return csi.PublishPath(m.rootDir, pod.UID, vol.Name)
	case plugin == "":
		return ""
	}
	return filepath.Join(m.podVolumesDir(pod.UID), plugin, vol.Name)
}

// metricsKindOf decides how a volume is measured, as upstream's plugins: du
// for the directories nodelet fills, statfs for local PVs, the driver for
// CSI, nothing for hostPath (inline or PV) and image volumes. A claim's kind
// follows from where its PV was mounted (path).
func metricsKindOf(src *v1.VolumeSource, path string) MetricsKind {
	switch {
	case path == "":
		return MetricsNone
	case src.EmptyDir != nil, src.ConfigMap != nil, src.Secret != nil, src.Projected != nil, src.DownwardAPI != nil:
		return MetricsDu
	case src.CSI != nil:
		return MetricsCSI
	case src.PersistentVolumeClaim != nil, src.Ephemeral != nil:
		switch {
		case filepath.Base(filepath.Dir(path)) == pluginLocalVolume:
			return MetricsStatfs
		case filepath.Base(path) == "mount" && filepath.Base(filepath.Dir(filepath.Dir(path))) == csi.PodPluginDir:
			return MetricsCSI
		}
	}
	return MetricsNone
}
