package podconfig

import (
	"context"
	"fmt"
	"maps"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/cri"
	"github.com/nodelet/nodelet/internal/podutil"
)

// RuntimePods is what the container runtime runs: its ready sandboxes and all
// its containers, as listed when nodelet starts.
type RuntimePods struct {
	Sandboxes  []*runtimeapi.PodSandbox
	Containers []*runtimeapi.Container
}

// RuntimeLister lists the runtime's pods (RuntimePods).
type RuntimeLister func(ctx context.Context) (RuntimePods, error)

// WithRuntimeLister lets the static sources adopt the static pods the upstream
// kubelet left running (AdoptedStaticPodUID). Without it none is adopted.
func WithRuntimeLister(l RuntimeLister) Option {
	return func(c *Config) { c.listRuntime = l }
}

// AdoptedStaticPodUID decides the UID of static pod (decoded from its source,
// with the UID nodelet derives from its manifest). The upstream kubelet derives
// a static pod's UID from a dump of its internal Pod type, which nodelet cannot
// reproduce, so the same manifest has another UID under each agent. When the
// runtime runs a ready sandbox of the same name and namespace that a kubelet
// made for a static pod of the same source (its annotations, which are the
// pod's, say so, and its config hash is its UID), and its containers are the
// manifest's (same names, and each container's recorded hash equals the
// upstream hash of its spec: same image), and so are its labels and
// annotations, the pod keeps that sandbox's UID: it
// is adopted without a restart, and its mirror pod (annotated with that UID)
// is kept. Otherwise the manifest changed since and the pod keeps its own UID:
// the running one is replaced, as it would be by the kubelet. Of several
// candidates the newest sandbox wins.
func AdoptedStaticPodUID(pod *v1.Pod, rt RuntimePods) types.UID {
	source := pod.Annotations[podutil.AnnotationConfigSource]
	if source != podutil.SourceFile && source != podutil.SourceHTTP {
		return pod.UID
	}
	var best *runtimeapi.PodSandbox
	for _, sb := range rt.Sandboxes {
		uid := sb.GetMetadata().GetUid()
		l, a := sb.GetLabels(), sb.GetAnnotations()
		switch {
		case sb.GetState() != runtimeapi.PodSandboxState_SANDBOX_READY,
			l[cri.LabelPodName] != pod.Name, l[cri.LabelPodNamespace] != pod.Namespace:
			continue
		case uid == string(pod.UID):
			return pod.UID // nodelet's own: nothing to adopt
		case uid == "", l[cri.LabelPodUID] != uid,
			a[podutil.AnnotationConfigSource] != source, a[podutil.AnnotationConfigHash] != uid:
			continue
		}
		if !metaMatches(pod, sb) || !containersMatch(pod, types.UID(uid), rt.Containers) {
			continue
		}
		if best == nil || sb.GetCreatedAt() > best.GetCreatedAt() {
			best = sb
		}
	}
	if best == nil {
		return pod.UID
	}
	return types.UID(best.GetMetadata().GetUid())
}

// metaMatches says whether the sandbox carries pod's labels and annotations,
// as the kubelet puts them on it (the pod's own, plus its name, namespace and
// UID labels and its config.* annotations): an edit of either since is a new
// manifest.
func metaMatches(pod *v1.Pod, sb *runtimeapi.PodSandbox) bool {
	own := func(m map[string]string, skip func(string) bool) map[string]string {
		out := map[string]string{}
		for k, v := range m {
			if !skip(k) {
				out[k] = v
			}
		}
		return out
	}
	isPodLabel := func(k string) bool {
		return k == cri.LabelPodName || k == cri.LabelPodNamespace || k == cri.LabelPodUID
	}
	isConfig := func(k string) bool { return strings.HasPrefix(k, "kubernetes.io/config.") }
	return maps.Equal(own(pod.Labels, isPodLabel), own(sb.GetLabels(), isPodLabel)) &&
		maps.Equal(own(pod.Annotations, isConfig), own(sb.GetAnnotations(), isConfig))
}

// containersMatch says whether the runtime's containers of pod UID uid are
// those of pod's spec: no name the spec lacks, every app container there, and
// the newest instance of each recording the upstream hash of its spec.
func containersMatch(pod *v1.Pod, uid types.UID, ctrs []*runtimeapi.Container) bool {
	specs := map[string]*v1.Container{}
	for i := range pod.Spec.InitContainers {
		specs[pod.Spec.InitContainers[i].Name] = &pod.Spec.InitContainers[i]
	}
	for i := range pod.Spec.Containers {
		specs[pod.Spec.Containers[i].Name] = &pod.Spec.Containers[i]
	}
	newest := map[string]*runtimeapi.Container{}
	for _, c := range ctrs {
		if c.GetLabels()[cri.LabelPodUID] != string(uid) {
			continue
		}
		name := c.GetLabels()[cri.LabelContainerName]
		if name == "" {
			name = c.GetMetadata().GetName()
		}
		if prev := newest[name]; prev == nil || c.GetCreatedAt() > prev.GetCreatedAt() {
			newest[name] = c
		}
	}
	for name, c := range newest {
		spec := specs[name]
		if spec == nil || !sameHash(c.GetAnnotations()[cri.AnnotationContainerHash], podutil.ContainerHash(spec)) {
			return false
		}
	}
	for i := range pod.Spec.Containers {
		if newest[pod.Spec.Containers[i].Name] == nil {
			return false
		}
	}
	return true
}

// sameHash compares two hex hashes as numbers, as upstream reads them. An older
// nodelet's "n"-prefixed hash never matches: that pod kept nodelet's own UID.
func sameHash(recorded, want string) bool {
	if recorded == "" || strings.HasPrefix(recorded, "n") {
		return false
	}
	got, err := strconv.ParseUint(recorded, 16, 64)
	w, _ := strconv.ParseUint(want, 16, 64)
	return err == nil && got == w
}

// ListRuntimePods lists the ready sandboxes and all containers through the
// two CRI calls.
func ListRuntimePods(ctx context.Context,
	sandboxes func(context.Context, *runtimeapi.PodSandboxFilter) ([]*runtimeapi.PodSandbox, error),
	containers func(context.Context, *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error)) (RuntimePods, error) {
	sbs, err := sandboxes(ctx, &runtimeapi.PodSandboxFilter{State: &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY}})
	if err != nil {
		return RuntimePods{}, fmt.Errorf("listing the runtime's sandboxes: %w", err)
	}
	cs, err := containers(ctx, &runtimeapi.ContainerFilter{})
	if err != nil {
		return RuntimePods{}, fmt.Errorf("listing the runtime's containers: %w", err)
	}
	return RuntimePods{Sandboxes: sbs, Containers: cs}, nil
}

// adoptStatic gives source's pods the UIDs they run under. Adoption is decided
// only before the source's first snapshot (at start-up, before any pod worker
// can see the pod and kill the foreign sandbox); later it is kept for as long
// as the manifest gives the same UID, so an edit replaces the pod as usual.
// Nothing is persisted: the running sandbox is found again at every start,
// which is what lets a node go back and forth between kubelet and nodelet.
func (c *Config) adoptStatic(ctx context.Context, source string, pods []*v1.Pod) {
	var rt *RuntimePods
	if !c.sourceReady(source) && c.listRuntime != nil && len(pods) > 0 {
		listed, err := c.listRuntime(ctx)
		if err != nil {
			klog.FromContext(ctx).Error(err, "Unable to list the runtime's pods: static pods the kubelet left running will be replaced, not adopted", "source", source)
		} else {
			rt = &listed
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	prev := c.adopted[source]
	next := map[types.UID]types.UID{}
	for _, p := range pods {
		own := p.UID
		uid, ok := prev[own]
		if !ok && rt != nil {
			uid = AdoptedStaticPodUID(p, *rt)
			if uid != own {
				klog.FromContext(ctx).Info("Adopting the running static pod the kubelet started", "pod", klog.KObj(p), "podUID", uid, "manifestUID", own, "source", source)
			}
		}
		if uid == "" || uid == own {
			continue
		}
		next[own] = uid
		p.UID = uid
		p.Annotations[podutil.AnnotationConfigHash] = string(uid)
	}
	c.adopted[source] = next
}
