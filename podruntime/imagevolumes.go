package podruntime

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/internal/podutil"
	"github.com/nodelet/nodelet/podstatus"
	"github.com/nodelet/nodelet/volumes"
)

// ImageVolumeSupport says whether the runtime mounts images (CRI Mount.image):
// nil when it does or is not known not to, else why not. containerd mounts
// them from 2.1 on; older ones take the mount for a bind mount of an empty
// host path, so a pod must not reach them with one.
func ImageVolumeSupport(runtimeName, runtimeVersion string) error {
	if runtimeName != "containerd" {
		return nil
	}
	v := strings.TrimPrefix(runtimeVersion, "v")
	majorS, rest, _ := strings.Cut(v, ".")
	minorS, _, _ := strings.Cut(rest, ".")
	major, err1 := strconv.Atoi(majorS)
	minor, err2 := strconv.Atoi(minorS)
	if err1 != nil || err2 != nil {
		return nil // an unparsable version is left to the runtime
	}
	if major > 2 || (major == 2 && minor >= 1) {
		return nil
	}
	return fmt.Errorf("the container runtime (containerd %s) does not support image volumes: containerd 2.1 or later does", runtimeVersion)
}

// imageVolumePolicy is an image volume's pull policy, defaulted as the API
// server defaults it.
func imageVolumePolicy(src *v1.ImageVolumeSource) v1.PullPolicy {
	if src.PullPolicy != "" {
		return src.PullPolicy
	}
	return podutil.DefaultPullPolicy(src.Reference)
}

// imageVolumeFailure is why an image volume could not be had, for the
// containers that mount it.
type imageVolumeFailure struct {
	image   string
	waiting podstatus.Waiting
	err     error
}

// pullImageVolumes pulls every image volume of the pod as a container image
// is pulled (the pod's pull secrets, pull records, back-off, events), as
// upstream does after the sandbox and before any container starts. Pulled
// volumes get their ImageRef in vols; the others are returned by name, and
// only the containers that mount them wait.
func (m *Manager) pullImageVolumes(ctx context.Context, pod *v1.Pod, vols map[string]volumes.HostVolume, sbCfg *runtimeapi.PodSandboxConfig) map[string]imageVolumeFailure {
	var failed map[string]imageVolumeFailure
	fail := func(name string, f imageVolumeFailure) {
		if failed == nil {
			failed = map[string]imageVolumeFailure{}
		}
		failed[name] = f
	}
	for i := range pod.Spec.Volumes {
		name := pod.Spec.Volumes[i].Name
		hv, ok := vols[name]
		if !ok || hv.Image == nil {
			continue
		}
		image := hv.Image.Reference
		if image == "" {
			err := fmt.Errorf("image volume %q has no reference", name)
			fail(name, imageVolumeFailure{image: image, waiting: podstatus.Waiting{Reason: "InvalidImageName", Message: err.Error()}, err: err})
			continue
		}
		if m.cfg.ImageVolumeSupport != nil {
			err := fmt.Errorf("mounting image volume %q: %w", name, m.cfg.ImageVolumeSupport)
			m.deps.Recorder.Eventf(pod, v1.EventTypeWarning, "Failed", "Error: %v", err)
			fail(name, imageVolumeFailure{image: image, waiting: podstatus.Waiting{Reason: "CreateContainerConfigError", Message: err.Error()}, err: err})
			continue
		}
		ref, w, err := m.ensureImageRef(ctx, pod, image, imageVolumePolicy(hv.Image), sbCfg)
		if w != nil || err != nil {
			// A back-off (a Waiting without error) is no sync error, as for a
			// container's own image.
			f := imageVolumeFailure{image: image}
			if err != nil {
				f.err = fmt.Errorf("pulling image volume %q: %w", name, err)
				klog.FromContext(ctx).Error(err, "Failed to ensure the image of an image volume", "pod", klog.KObj(pod), "volume", name, "image", image)
			}
			if w != nil {
				f.waiting = *w
			} else {
				f.waiting = podstatus.Waiting{Reason: "ErrImagePull", Message: err.Error()}
			}
			fail(name, f)
			continue
		}
		klog.FromContext(ctx).V(4).Info("Image volume ready", "pod", klog.KObj(pod), "volume", name, "imageRef", ref)
		hv.ImageRef = ref
		vols[name] = hv
	}
	return failed
}

// imageVolumeBlocking returns the first failed image volume c mounts.
func imageVolumeBlocking(c *v1.Container, failed map[string]imageVolumeFailure) (imageVolumeFailure, bool) {
	for _, vm := range c.VolumeMounts {
		if f, ok := failed[vm.Name]; ok {
			return f, true
		}
	}
	return imageVolumeFailure{}, false
}

// imageMount is the CRI mount of an image volume: the pulled image, read-only
// whatever the volumeMount says, with the volumeMount's sub path inside it.
func imageMount(vm *v1.VolumeMount, hv volumes.HostVolume, sub string) (*runtimeapi.Mount, error) {
	if hv.ImageRef == "" {
		return nil, fmt.Errorf("image volume %q is not pulled", vm.Name)
	}
	return &runtimeapi.Mount{
		ContainerPath: vm.MountPath,
		Image:         &runtimeapi.ImageSpec{Image: hv.ImageRef, UserSpecifiedImage: hv.Image.Reference},
		ImageSubPath:  sub,
		Readonly:      true,
		Propagation:   runtimeapi.MountPropagation_PROPAGATION_PRIVATE,
	}, nil
}
