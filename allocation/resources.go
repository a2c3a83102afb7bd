package allocation

import (
	v1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
)

// ResourceInfoForPod is what admitting pod allocates: the resources of every
// container that can be resized (app and init containers: upstream's
// InPlacePodVerticalScalingInitContainers is GA) and its pod-level resources.
// Ephemeral containers have no resources.
func ResourceInfoForPod(pod *v1.Pod) PodResourceInfo {
	info := PodResourceInfo{ContainerResources: map[string]v1.ResourceRequirements{}}
	if pod.Spec.Resources != nil {
		info.PodLevelResources = pod.Spec.Resources.DeepCopy()
	}
	for _, list := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range list {
			info.ContainerResources[list[i].Name] = *list[i].Resources.DeepCopy()
		}
	}
	return info
}

// UpdatePodFromAllocation returns pod with its resources replaced by the
// allocated ones (a copy only when they differ) and whether they differed.
// Containers the allocation does not name keep their spec.
func UpdatePodFromAllocation(pod *v1.Pod, alloc PodResourceInfo) (*v1.Pod, bool) {
	if pod == nil {
		return nil, false
	}
	out := pod
	copied := false
	mutable := func() *v1.Pod {
		if !copied {
			out, copied = pod.DeepCopy(), true
		}
		return out
	}
	if !apiequality.Semantic.DeepEqual(pod.Spec.Resources, alloc.PodLevelResources) {
		mutable().Spec.Resources = alloc.PodLevelResources.DeepCopy()
	}
	for _, init := range []bool{true, false} {
		list := pod.Spec.Containers
		if init {
			list = pod.Spec.InitContainers
		}
		for i := range list {
			a, ok := alloc.ContainerResources[list[i].Name]
			if !ok || apiequality.Semantic.DeepEqual(list[i].Resources, a) {
				continue
			}
			p := mutable()
			if init {
				p.Spec.InitContainers[i].Resources = *a.DeepCopy()
			} else {
				p.Spec.Containers[i].Resources = *a.DeepCopy()
			}
		}
	}
	return out, copied
}
