package podconfig

import (
	"context"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/podutil"
	"github.com/nodelet/nodelet/internal/testsupport/eventually"
)

func apiPod(name string, uid types.UID, node string) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: uid, Labels: map[string]string{"a": "1"}},
		Spec: v1.PodSpec{
			NodeName:   node,
			Containers: []v1.Container{{Name: "c", Image: "busybox:1"}},
		},
		Status: v1.PodStatus{Phase: v1.PodPending},
	}
}

func startAPI(t *testing.T, client *fake.Clientset) (*Config, func()) {
	t.Helper()
	c := New(testNode, clocktesting.NewFakeClock(time.Now()), WithSources(podutil.SourceAPI))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); c.RunAPISource(ctx, client) }()
	return c, func() { cancel(); <-done }
}

func TestAPISourceOps(t *testing.T) {
	client := fake.NewClientset(
		apiPod("p1", "u1", testNode),
		apiPod("p2", "u2", testNode),
		apiPod("other", "u3", "node-b"), // not ours
		func() *v1.Pod { // a mirror pod: not a pod to run
			m := apiPod("web-"+testNode, "m1", testNode)
			m.Annotations = map[string]string{podutil.AnnotationConfigMirror: "h"}
			return m
		}(),
	)
	c, stop := startAPI(t, client)
	defer stop()
	pods := client.CoreV1().Pods("ns")
	ctx := context.Background()

	u := next(t, c)
	if u.Op != OpAdd || u.Source != podutil.SourceAPI || len(u.Pods) != 2 {
		t.Fatalf("initial = %s %s with %d pods, want one Add of 2", u.Op, u.Source, len(u.Pods))
	}
	if u.Pods[0].Annotations[podutil.AnnotationConfigSource] != podutil.SourceAPI {
		t.Errorf("source annotation = %q", u.Pods[0].Annotations[podutil.AnnotationConfigSource])
	}
	eventually.True(t, "the sources to be ready", c.SourcesReady)

	get := func(name string) *v1.Pod {
		p, err := pods.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	update := func(p *v1.Pod) {
		if _, err := pods.Update(ctx, p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	steps := []struct {
		name   string
		act    func()
		wantOp Op
		wantID types.UID
	}{
		{"label change", func() { p := get("p1"); p.Labels["a"] = "2"; update(p) }, OpUpdate, "u1"},
		{"status only", func() { p := get("p1"); p.Status.Phase = v1.PodRunning; update(p) }, OpReconcile, "u1"},
		{"graceful delete", func() {
			p := get("p2")
			now := metav1.Now()
			g := int64(30)
			p.DeletionTimestamp, p.DeletionGracePeriodSeconds = &now, &g
			update(p)
		}, OpUpdate, "u2"},
		{"new pod", func() {
			if _, err := pods.Create(ctx, apiPod("p4", "u4", testNode), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}, OpAdd, "u4"},
		{"deleted", func() {
			if err := pods.Delete(ctx, "p1", metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}, OpRemove, "u1"},
	}
	for _, s := range steps {
		s.act()
		u := next(t, c)
		if u.Op != s.wantOp || len(u.Pods) != 1 || u.Pods[0].UID != s.wantID {
			t.Fatalf("%s: got %s of %d pods (first %v), want %s of %s", s.name, u.Op, len(u.Pods), u.Pods[0].UID, s.wantOp, s.wantID)
		}
	}

	// A change of nothing we compare (an annotation we own is re-added, only the
	// resource version moves) emits nothing.
	p := get("p4")
	p.ResourceVersion = ""
	update(p)
	expectNone(t, c)
}

func staticFixture(t *testing.T, c *Config) *v1.Pod {
	t.Helper()
	pod, err := decodeOne([]byte(goodPod), "/m/web.yaml", testNode)
	if err != nil {
		t.Fatal(err)
	}
	c.setSnapshot(podutil.SourceFile, []*v1.Pod{pod})
	<-c.Updates()
	return pod
}

func mirrorOf(static *v1.Pod, uid types.UID, hash string) *v1.Pod {
	m := mirrorFor(static, testNode, "node-uid")
	m.UID = uid
	m.Annotations[podutil.AnnotationConfigMirror] = hash
	return m
}

func TestMirrorPodsHiddenAndIndexed(t *testing.T) {
	c := New(testNode, clocktesting.NewFakeClock(time.Now()))
	static := staticFixture(t, c)
	hash := static.Annotations[podutil.AnnotationConfigHash]
	mirror := mirrorOf(static, "mirror-1", hash)

	c.apiEvent(mirror, false, false)
	expectNone(t, c)
	if m, ok := c.MirrorPod(static.UID); !ok || m.UID != "mirror-1" {
		t.Fatalf("MirrorPod = %v, %v", m, ok)
	}
	if s, ok := c.StaticPodFor("mirror-1"); !ok || s.UID != static.UID {
		t.Fatalf("StaticPodFor = %v, %v", s, ok)
	}
	if _, ok := c.StaticPodFor("nope"); ok {
		t.Error("StaticPodFor found a pod for an unknown mirror")
	}

	// A mirror of an older version of the static pod is not its mirror.
	stale := mirrorOf(static, "mirror-2", "old-hash")
	c.apiEvent(stale, false, false)
	if _, ok := c.MirrorPod(static.UID); ok {
		t.Error("MirrorPod returned a mirror with another hash")
	}
	c.apiEvent(stale, true, false)
	if _, ok := c.MirrorPod(static.UID); ok {
		t.Error("MirrorPod returned a deleted mirror")
	}
}

func TestMirrorReconciler(t *testing.T) {
	now := metav1.Now()
	tests := []struct {
		name       string
		mirror     func(static *v1.Pod) *v1.Pod // in the API and the index before the pass
		orphan     bool                         // also an orphaned mirror
		nodeUID    types.UID
		apiReady   bool
		wantVerbs  []string
		wantMirror bool // a correct mirror exists after the pass
	}{
		{name: "creates missing", nodeUID: "node-uid", apiReady: true, wantVerbs: []string{"create"}, wantMirror: true},
		{name: "up to date is left alone", nodeUID: "node-uid", apiReady: true,
			mirror: func(s *v1.Pod) *v1.Pod { return mirrorOf(s, "m1", s.Annotations[podutil.AnnotationConfigHash]) }, wantMirror: true},
		{name: "other hash recreated", nodeUID: "node-uid", apiReady: true,
			mirror:    func(s *v1.Pod) *v1.Pod { return mirrorOf(s, "m1", "old") },
			wantVerbs: []string{"delete", "create"}, wantMirror: true},
		{name: "being deleted recreated", nodeUID: "node-uid", apiReady: true,
			mirror: func(s *v1.Pod) *v1.Pod {
				m := mirrorOf(s, "m1", s.Annotations[podutil.AnnotationConfigHash])
				m.DeletionTimestamp = &now
				return m
			},
			wantVerbs: []string{"delete", "create"}, wantMirror: true},
		{name: "orphan deleted", nodeUID: "node-uid", apiReady: true, orphan: true,
			mirror: func(s *v1.Pod) *v1.Pod { return mirrorOf(s, "m1", s.Annotations[podutil.AnnotationConfigHash]) }, wantVerbs: []string{"delete"}, wantMirror: true},
		{name: "node not registered", apiReady: true},
		{name: "api not synced", nodeUID: "node-uid"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client := fake.NewClientset()
			c := New(testNode, clocktesting.NewFakeClock(time.Now()))
			static := staticFixture(t, c)
			var objs []*v1.Pod
			if tt.mirror != nil {
				objs = append(objs, tt.mirror(static))
			}
			if tt.orphan {
				o := apiPod("gone-"+testNode, "m-orphan", testNode)
				o.Annotations = map[string]string{podutil.AnnotationConfigMirror: "x"}
				objs = append(objs, o)
			}
			for _, o := range objs {
				if err := client.Tracker().Add(o); err != nil {
					t.Fatal(err)
				}
				c.apiEvent(o, false, false)
			}
			if tt.apiReady {
				c.markReady(podutil.SourceAPI)
			}
			client.ClearActions()

			c.reconcileMirrors(context.Background(), client, tt.nodeUID)

			var verbs []string
			for _, a := range client.Actions() {
				verbs = append(verbs, a.GetVerb())
				if d, ok := a.(interface{ GetDeleteOptions() metav1.DeleteOptions }); ok {
					o := d.GetDeleteOptions()
					if o.GracePeriodSeconds == nil || *o.GracePeriodSeconds != 0 || o.Preconditions == nil || o.Preconditions.UID == nil {
						t.Errorf("delete options %+v, want grace 0 and a UID precondition", o)
					}
				}
			}
			if len(verbs) != len(tt.wantVerbs) {
				t.Fatalf("verbs %v, want %v", verbs, tt.wantVerbs)
			}
			for i := range verbs {
				if verbs[i] != tt.wantVerbs[i] {
					t.Fatalf("verbs %v, want %v", verbs, tt.wantVerbs)
				}
			}
			got, err := client.CoreV1().Pods(static.Namespace).Get(context.Background(), static.Name, metav1.GetOptions{})
			if !tt.wantMirror {
				if err == nil {
					t.Fatalf("mirror exists: %v", got.UID)
				}
				return
			}
			if err != nil {
				t.Fatalf("no mirror: %v", err)
			}
			if got.Annotations[podutil.AnnotationConfigMirror] != static.Annotations[podutil.AnnotationConfigHash] {
				t.Errorf("mirror annotation %q, want the static hash", got.Annotations[podutil.AnnotationConfigMirror])
			}
			if got.UID == static.UID {
				t.Error("mirror was created with the static pod's UID")
			}
			refs := got.OwnerReferences
			if len(refs) != 1 || refs[0].Kind != "Node" || refs[0].Name != testNode || refs[0].UID != "node-uid" ||
				refs[0].APIVersion != "v1" || refs[0].Controller == nil || !*refs[0].Controller {
				t.Errorf("owner references %+v, want the Node as controller", refs)
			}
		})
	}
}

// TestMirrorReconcilerEndToEnd wires the API watch and the reconciler: a static pod gets a
// mirror in the API, the watch indexes it, and when the static pod goes the mirror goes.
func TestMirrorReconcilerEndToEnd(t *testing.T) {
	client := fake.NewClientset()
	c := New(testNode, clocktesting.NewFakeClock(time.Now()), WithSources(podutil.SourceAPI, podutil.SourceFile))
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	wg.Go(func() { c.RunAPISource(ctx, client) })
	// The period never elapses on the fake clock: only triggers drive the passes.
	wg.Go(func() { c.RunMirrorReconciler(ctx, client, func() types.UID { return "node-uid" }, time.Hour) })

	static := staticFixture(t, c)
	eventually.True(t, "the mirror pod", func() bool { _, ok := c.MirrorPod(static.UID); return ok })
	eventually.True(t, "the sources to be ready", c.SourcesReady)
	expectNone(t, c) // the mirror is not a pod to run

	c.setSnapshot(podutil.SourceFile, nil)
	if u := next(t, c); u.Op != OpRemove {
		t.Fatalf("got %s, want Remove", u.Op)
	}
	eventually.True(t, "the mirror pod to be deleted", func() bool {
		_, err := client.CoreV1().Pods(static.Namespace).Get(ctx, static.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
}

func TestSourcesReady(t *testing.T) {
	c := New(testNode, clocktesting.NewFakeClock(time.Now()), WithSources(podutil.SourceAPI, podutil.SourceFile))
	steps := []struct {
		name string
		act  func()
		want bool
	}{
		{"nothing read", func() {}, false},
		{"file read", func() { c.setSnapshot(podutil.SourceFile, nil) }, false},
		{"api synced", func() { c.markReady(podutil.SourceAPI) }, true},
	}
	for _, s := range steps {
		s.act()
		if got := c.SourcesReady(); got != s.want {
			t.Errorf("%s: SourcesReady = %v, want %v", s.name, got, s.want)
		}
	}
	if New(testNode, clocktesting.NewFakeClock(time.Now())).SourcesReady() {
		t.Error("ready with no sources at all")
	}
}
