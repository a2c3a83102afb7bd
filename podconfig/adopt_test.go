package podconfig

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/cri"
	"github.com/nodelet/nodelet/internal/podutil"
)

// kubeletUID stands for the UID the upstream kubelet derived for a manifest.
const kubeletUID = "6f1e0cbbd0e5e0bd2a6d5f1c0b9b8f61"

func manifestPod(source string) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "etcd-" + testNode, Namespace: "kube-system", UID: "nodelet-uid",
			Annotations: map[string]string{podutil.AnnotationConfigSource: source, podutil.AnnotationConfigHash: "nodelet-uid"}},
		Spec: v1.PodSpec{
			InitContainers: []v1.Container{{Name: "setup", Image: "busybox:1.36"}},
			Containers:     []v1.Container{{Name: "etcd", Image: "registry.k8s.io/etcd:3.6.0"}, {Name: "side", Image: "busybox:1.36"}},
		},
	}
}

// sandbox is a sandbox as the kubelet makes it for a static pod: the pod's
// labels and annotations (config.source, config.hash = UID) on it.
func sandbox(uid, name string, state runtimeapi.PodSandboxState, source string, created int64) *runtimeapi.PodSandbox {
	return &runtimeapi.PodSandbox{
		Id: "sb-" + uid, State: state, CreatedAt: created,
		Metadata: &runtimeapi.PodSandboxMetadata{Name: name, Namespace: "kube-system", Uid: uid},
		Labels:   map[string]string{cri.LabelPodName: name, cri.LabelPodNamespace: "kube-system", cri.LabelPodUID: uid},
		Annotations: map[string]string{podutil.AnnotationConfigSource: source, podutil.AnnotationConfigHash: uid,
			podutil.AnnotationConfigSeen: "2026-12-07T10:00:00Z"},
	}
}

func container(uid, name, image string, created int64) *runtimeapi.Container {
	return &runtimeapi.Container{
		Id: uid + "-" + name, CreatedAt: created, Metadata: &runtimeapi.ContainerMetadata{Name: name},
		Labels:      map[string]string{cri.LabelPodUID: uid, cri.LabelContainerName: name},
		Annotations: map[string]string{cri.AnnotationContainerHash: podutil.ContainerHash(&v1.Container{Name: name, Image: image})},
	}
}

// kubeletPod is the kubelet's running copy of manifestPod.
func kubeletPod(uid string) RuntimePods {
	return RuntimePods{
		Sandboxes: []*runtimeapi.PodSandbox{sandbox(uid, "etcd-"+testNode, runtimeapi.PodSandboxState_SANDBOX_READY, podutil.SourceFile, 10)},
		Containers: []*runtimeapi.Container{
			container(uid, "setup", "busybox:1.36", 11),
			container(uid, "etcd", "registry.k8s.io/etcd:3.6.0", 12),
			container(uid, "side", "busybox:1.36", 13),
		},
	}
}

func TestAdoptedStaticPodUID(t *testing.T) {
	own := types.UID("nodelet-uid")
	tests := []struct {
		name   string
		source string // of the manifest pod; file unless set
		pod    func(*v1.Pod)
		rt     func(RuntimePods) RuntimePods
		want   types.UID
	}{
		{name: "nothing runs", rt: func(RuntimePods) RuntimePods { return RuntimePods{} }, want: own},
		{name: "the kubelet's pod, same manifest: adopted", want: kubeletUID},
		{name: "from the URL source too", source: podutil.SourceHTTP, rt: func(r RuntimePods) RuntimePods {
			r.Sandboxes[0].Annotations[podutil.AnnotationConfigSource] = podutil.SourceHTTP
			return r
		}, want: kubeletUID},
		{name: "source differs", source: podutil.SourceHTTP, want: own},
		{name: "an API pod is never adopted", source: podutil.SourceAPI, want: own},
		{name: "image changed", rt: func(r RuntimePods) RuntimePods {
			r.Containers[1] = container(kubeletUID, "etcd", "registry.k8s.io/etcd:3.5.0", 12)
			return r
		}, want: own},
		{name: "init container image changed", rt: func(r RuntimePods) RuntimePods {
			r.Containers[0] = container(kubeletUID, "setup", "busybox:1.35", 11)
			return r
		}, want: own},
		{name: "a container the manifest no longer has", rt: func(r RuntimePods) RuntimePods {
			r.Containers = append(r.Containers, container(kubeletUID, "old", "busybox:1.36", 14))
			return r
		}, want: own},
		{name: "a container the manifest added", rt: func(r RuntimePods) RuntimePods {
			r.Containers = r.Containers[:2]
			return r
		}, want: own},
		{name: "init container garbage collected: still adopted", rt: func(r RuntimePods) RuntimePods {
			r.Containers = r.Containers[1:]
			return r
		}, want: kubeletUID},
		{name: "the newest instance of a name decides", rt: func(r RuntimePods) RuntimePods {
			r.Containers = append(r.Containers, container(kubeletUID, "etcd", "registry.k8s.io/etcd:3.5.0", 5))
			return r
		}, want: kubeletUID},
		{name: "other pods' containers are not looked at", rt: func(r RuntimePods) RuntimePods {
			r.Containers = append(r.Containers, container("other", "extra", "x", 20))
			return r
		}, want: kubeletUID},
		{name: "labels and annotations carried over: adopted", pod: func(p *v1.Pod) {
			p.Labels = map[string]string{"tier": "control-plane"}
			p.Annotations["kubeadm.kubernetes.io/etcd.advertise-client-urls"] = "https://10.0.0.1:2379"
		}, rt: func(r RuntimePods) RuntimePods {
			r.Sandboxes[0].Labels["tier"] = "control-plane"
			r.Sandboxes[0].Annotations["kubeadm.kubernetes.io/etcd.advertise-client-urls"] = "https://10.0.0.1:2379"
			return r
		}, want: kubeletUID},
		{name: "a label edited", pod: func(p *v1.Pod) { p.Labels = map[string]string{"tier": "control-plane"} }, want: own},
		{name: "an annotation removed", rt: func(r RuntimePods) RuntimePods {
			r.Sandboxes[0].Annotations["note"] = "x"
			return r
		}, want: own},
		{name: "sandbox not ready", rt: func(r RuntimePods) RuntimePods {
			r.Sandboxes[0].State = runtimeapi.PodSandboxState_SANDBOX_NOTREADY
			return r
		}, want: own},
		{name: "another pod's name", rt: func(r RuntimePods) RuntimePods {
			r.Sandboxes[0].Labels[cri.LabelPodName] = "etcd-other"
			return r
		}, want: own},
		{name: "another namespace", rt: func(r RuntimePods) RuntimePods {
			r.Sandboxes[0].Labels[cri.LabelPodNamespace] = "default"
			return r
		}, want: own},
		{name: "no static source annotation", rt: func(r RuntimePods) RuntimePods {
			delete(r.Sandboxes[0].Annotations, podutil.AnnotationConfigSource)
			return r
		}, want: own},
		{name: "config hash is not the UID", rt: func(r RuntimePods) RuntimePods {
			r.Sandboxes[0].Annotations[podutil.AnnotationConfigHash] = "something-else"
			return r
		}, want: own},
		{name: "an older nodelet's hashes do not match", rt: func(r RuntimePods) RuntimePods {
			for _, c := range r.Containers {
				c.Annotations[cri.AnnotationContainerHash] = "n468e852"
			}
			return r
		}, want: own},
		{name: "nodelet's own sandbox runs: nothing to adopt", rt: func(r RuntimePods) RuntimePods {
			own := kubeletPod(string(own))
			r.Sandboxes = append(r.Sandboxes, own.Sandboxes...)
			r.Containers = append(r.Containers, own.Containers...)
			return r
		}, want: own},
		{name: "of two kubelet sandboxes the newest", rt: func(r RuntimePods) RuntimePods {
			newer := kubeletPod("newer-uid")
			newer.Sandboxes[0].CreatedAt = 100
			r.Sandboxes = append(newer.Sandboxes, r.Sandboxes...)
			r.Containers = append(r.Containers, newer.Containers...)
			return r
		}, want: "newer-uid"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			source := tt.source
			if source == "" {
				source = podutil.SourceFile
			}
			rt := kubeletPod(kubeletUID)
			if tt.rt != nil {
				rt = tt.rt(rt)
			}
			pod := manifestPod(source)
			if tt.pod != nil {
				tt.pod(pod)
			}
			if got := AdoptedStaticPodUID(pod, rt); got != tt.want {
				t.Errorf("AdoptedStaticPodUID() = %q, want %q", got, tt.want)
			}
		})
	}
}

const etcdManifest = `apiVersion: v1
kind: Pod
metadata:
  name: etcd
  namespace: kube-system
spec:
  initContainers:
  - name: setup
    image: busybox:1.36
  containers:
  - name: etcd
    image: registry.k8s.io/etcd:3.6.0
  - name: side
    image: busybox:1.36
`

// TestFileSourceAdoptsKubeletPod: the file source's first read gives the pod
// the kubelet's UID and config hash, so its running sandbox and mirror pod are
// kept; later reads of the same manifest keep it without asking the runtime
// again; an edited manifest is a new pod with nodelet's own UID.
func TestFileSourceAdoptsKubeletPod(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "etcd.yaml")
	writeFile(t, file, etcdManifest)
	lists := 0
	rt := kubeletPod(kubeletUID)
	lister := func(context.Context) (RuntimePods, error) { lists++; return rt, nil }
	c := New(testNode, clocktesting.NewFakeClock(time.Now()), WithSources(podutil.SourceFile, podutil.SourceAPI), WithRuntimeLister(lister))

	c.readFileSource(context.Background(), dir)
	u := next(t, c)
	if u.Op != OpAdd || len(u.Pods) != 1 {
		t.Fatalf("got %s of %d pods, want Add of one", u.Op, len(u.Pods))
	}
	pod := u.Pods[0]
	if pod.UID != kubeletUID || pod.Annotations[podutil.AnnotationConfigHash] != kubeletUID {
		t.Fatalf("pod UID %q, config hash %q, want the kubelet's %q", pod.UID, pod.Annotations[podutil.AnnotationConfigHash], kubeletUID)
	}

	// The kubelet's mirror pod (annotated with its UID) is this pod's mirror: kept.
	client := fake.NewClientset()
	mirror := mirrorOf(pod, "mirror-1", kubeletUID)
	if err := client.Tracker().Add(mirror); err != nil {
		t.Fatal(err)
	}
	c.apiEvent(mirror, false, false)
	c.markReady(podutil.SourceAPI)
	client.ClearActions()
	c.reconcileMirrors(context.Background(), client, "node-uid")
	if a := client.Actions(); len(a) != 0 {
		t.Errorf("mirror pod reconciler acted: %v, want the kubelet's mirror pod kept", a)
	}
	if m, ok := c.MirrorPod(kubeletUID); !ok || m.UID != "mirror-1" {
		t.Errorf("MirrorPod(%s) = %v, %v, want mirror-1", kubeletUID, m, ok)
	}

	// Read again: the same pod, no update, no second listing (even if the
	// sandbox were gone now: the pod is nodelet's to run).
	rt = RuntimePods{}
	c.readFileSource(context.Background(), dir)
	expectNone(t, c)
	if lists != 1 {
		t.Errorf("runtime listed %d times, want once", lists)
	}

	// An edit is a new pod with nodelet's UID, even one that the start-up
	// rule would adopt (same containers, images, labels and annotations).
	rt = kubeletPod(kubeletUID)
	writeFile(t, file, strings.Replace(etcdManifest, "image: registry.k8s.io/etcd:3.6.0", "image: registry.k8s.io/etcd:3.6.0\n    command: [etcd]", 1))
	c.readFileSource(context.Background(), dir)
	rm, add := next(t, c), next(t, c)
	if rm.Op != OpRemove || rm.Pods[0].UID != kubeletUID {
		t.Errorf("got %s of %s, want Remove of the adopted pod", rm.Op, rm.Pods[0].UID)
	}
	if add.Op != OpAdd || add.Pods[0].UID == kubeletUID || string(add.Pods[0].UID) != add.Pods[0].Annotations[podutil.AnnotationConfigHash] {
		t.Errorf("got %s of %s (hash %s), want Add with nodelet's own UID", add.Op, add.Pods[0].UID, add.Pods[0].Annotations[podutil.AnnotationConfigHash])
	}
}

// TestFileSourceWithoutRuntimeListing: a runtime that cannot be listed adopts
// nothing (the pod is replaced as before) and the source still becomes ready.
func TestFileSourceWithoutRuntimeListing(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "etcd.yaml"), etcdManifest)
	c := New(testNode, clocktesting.NewFakeClock(time.Now()), WithRuntimeLister(func(context.Context) (RuntimePods, error) {
		return RuntimePods{}, errors.New("runtime down")
	}))
	c.readFileSource(context.Background(), dir)
	u := next(t, c)
	data, err := os.ReadFile(filepath.Join(dir, "etcd.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	want := staticPodUID(data, testNode, fileOrigin(filepath.Join(dir, "etcd.yaml")))
	if u.Pods[0].UID != want || !c.SourcesReady() {
		t.Errorf("UID %q, ready %v; want nodelet's own %q and ready", u.Pods[0].UID, c.SourcesReady(), want)
	}
}
