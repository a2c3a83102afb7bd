package podobjects

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/internal/testsupport/eventually"
	"github.com/nodelet/nodelet/internal/testsupport/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.VerifyTestMain(m) }

const ns = "ns"

func cm(name, v string) *v1.ConfigMap {
	return &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string]string{"k": v}}
}

func podRef(uid, cmName, secretName string) *v1.Pod {
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "p-" + uid, UID: types.UID(uid)}}
	if cmName != "" {
		p.Spec.Volumes = append(p.Spec.Volumes, v1.Volume{Name: "c", VolumeSource: v1.VolumeSource{
			ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: cmName}}}})
	}
	if secretName != "" {
		p.Spec.Volumes = append(p.Spec.Volumes, v1.Volume{Name: "s", VolumeSource: v1.VolumeSource{
			Secret: &v1.SecretVolumeSource{SecretName: secretName}}})
	}
	return p
}

// counting counts GETs and LISTs per resource, and gives each watch to the test
// once the tracker registered it (so no change can fall between list and watch).
type counting struct {
	mu      sync.Mutex
	gets    map[string]int
	lists   map[string]int
	watches chan string
}

func newClient(t *testing.T, objs ...runtime.Object) (*fake.Clientset, *counting) {
	t.Helper()
	c := fake.NewClientset(objs...)
	n := &counting{gets: map[string]int{}, lists: map[string]int{}, watches: make(chan string, 100)}
	c.PrependReactor("get", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		n.mu.Lock()
		n.gets[a.GetResource().Resource]++
		n.mu.Unlock()
		return false, nil, nil
	})
	c.PrependReactor("list", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		n.mu.Lock()
		n.lists[a.GetResource().Resource]++
		n.mu.Unlock()
		return false, nil, nil
	})
	c.PrependWatchReactor("*", func(a k8stesting.Action) (bool, watch.Interface, error) {
		var opts metav1.ListOptions
		if wa, ok := a.(k8stesting.WatchActionImpl); ok {
			opts = wa.ListOptions
		}
		w, err := c.Tracker().Watch(a.GetResource(), a.GetNamespace(), opts)
		if err == nil {
			n.watches <- a.GetResource().Resource
		}
		return true, w, err
	})
	return c, n
}

func (n *counting) get(res string) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.gets[res]
}

func (n *counting) list(res string) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.lists[res]
}

func run(t *testing.T, m *Manager) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { m.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

// waitWatches waits until watches of the given resources started (in any order).
func waitWatches(t *testing.T, n *counting, res ...string) {
	t.Helper()
	want := map[string]int{}
	for _, r := range res {
		want[r]++
	}
	for range res {
		select {
		case got := <-n.watches:
			if want[got] == 0 {
				t.Fatalf("unexpected watch of %s started (waiting for %v)", got, res)
			}
			want[got]--
		case <-time.After(eventually.Timeout):
			t.Fatalf("watches of %v did not all start", res)
		}
	}
}

func TestReferences(t *testing.T) {
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns}, Spec: v1.PodSpec{
		ImagePullSecrets: []v1.LocalObjectReference{{Name: "pull"}},
		Volumes: []v1.Volume{
			{Name: "a", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: "cm-vol"}}}},
			{Name: "b", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: "s-vol"}}},
			{Name: "c", VolumeSource: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{Sources: []v1.VolumeProjection{
				{ConfigMap: &v1.ConfigMapProjection{LocalObjectReference: v1.LocalObjectReference{Name: "cm-proj"}}},
				{Secret: &v1.SecretProjection{LocalObjectReference: v1.LocalObjectReference{Name: "s-proj"}}},
				{DownwardAPI: &v1.DownwardAPIProjection{}},
			}}}},
			{Name: "d", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
		},
		InitContainers: []v1.Container{{EnvFrom: []v1.EnvFromSource{{SecretRef: &v1.SecretEnvSource{LocalObjectReference: v1.LocalObjectReference{Name: "s-init"}}}}}},
		Containers: []v1.Container{{
			Env: []v1.EnvVar{
				{Name: "X", ValueFrom: &v1.EnvVarSource{ConfigMapKeyRef: &v1.ConfigMapKeySelector{LocalObjectReference: v1.LocalObjectReference{Name: "cm-env"}}}},
				{Name: "Y", ValueFrom: &v1.EnvVarSource{SecretKeyRef: &v1.SecretKeySelector{LocalObjectReference: v1.LocalObjectReference{Name: "s-env"}}}},
				{Name: "Z", Value: "plain"},
			},
			EnvFrom: []v1.EnvFromSource{{ConfigMapRef: &v1.ConfigMapEnvSource{LocalObjectReference: v1.LocalObjectReference{Name: "cm-from"}}}},
		}},
		EphemeralContainers: []v1.EphemeralContainer{{EphemeralContainerCommon: v1.EphemeralContainerCommon{
			EnvFrom: []v1.EnvFromSource{{ConfigMapRef: &v1.ConfigMapEnvSource{LocalObjectReference: v1.LocalObjectReference{Name: "cm-eph"}}}}}}},
	}}
	want := map[Key]bool{}
	for _, n := range []string{"cm-vol", "cm-proj", "cm-env", "cm-from", "cm-eph"} {
		want[Key{ConfigMap, ns, n}] = true
	}
	for _, n := range []string{"pull", "s-vol", "s-proj", "s-init", "s-env"} {
		want[Key{Secret, ns, n}] = true
	}
	got := References(p)
	if len(got) != len(want) {
		t.Fatalf("References = %v, want %v", got, want)
	}
	for k := range want {
		if !got[k] {
			t.Errorf("References misses %v (got %v)", k, got)
		}
	}
}

func TestNewRejectsUnknownStrategy(t *testing.T) {
	if _, err := New("Poll", nil, clocktesting.NewFakeClock(time.Now())); err == nil {
		t.Fatal("New accepted strategy Poll")
	}
	m, err := New("", nil, clocktesting.NewFakeClock(time.Now()))
	if err != nil || m.Strategy() != kubeletconfigv1beta1.WatchChangeDetectionStrategy {
		t.Fatalf("New(\"\") = %v, %v; want the Watch strategy", m, err)
	}
}

// Watch: a registered object is read from its watch (no GET), changes show up
// without a new registration, a created optional object appears, a deleted one
// is NotFound, and the watch stops when the last pod unregisters.
func TestWatchStrategy(t *testing.T) {
	ctx := context.Background()
	client, n := newClient(t, cm("a", "1"))
	m, err := New(kubeletconfigv1beta1.WatchChangeDetectionStrategy, client, clocktesting.NewFakeClock(time.Now()))
	if err != nil {
		t.Fatal(err)
	}
	run(t, m)

	m.RegisterPod(podRef("u1", "a", "later"))
	waitWatches(t, n, "configmaps", "secrets")
	got, err := m.GetConfigMap(ctx, ns, "a")
	if err != nil || got.Data["k"] != "1" {
		t.Fatalf("GetConfigMap = %v, %v; want k=1", got, err)
	}
	if _, err := m.GetSecret(ctx, ns, "later"); !apierrors.IsNotFound(err) || err.Error() != `secret "later" not found` {
		t.Fatalf("GetSecret of a missing secret = %v; want upstream's NotFound wording", err)
	}

	if _, err := client.CoreV1().ConfigMaps(ns).Update(ctx, cm("a", "2"), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, "the watch to bring k=2", func() bool {
		got, err := m.GetConfigMap(ctx, ns, "a")
		return err == nil && got.Data["k"] == "2"
	})
	if _, err := client.CoreV1().Secrets(ns).Create(ctx, &v1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "later"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, "the created secret to show", func() bool {
		_, err := m.GetSecret(ctx, ns, "later")
		return err == nil
	})
	if err := client.CoreV1().ConfigMaps(ns).Delete(ctx, "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, "the deleted configmap to be NotFound", func() bool {
		_, err := m.GetConfigMap(ctx, ns, "a")
		return apierrors.IsNotFound(err)
	})
	if g := n.get("configmaps") + n.get("secrets"); g != 0 {
		t.Errorf("registered objects were read with %d GETs; want 0 (the watch serves them)", g)
	}

	// A second pod shares the watch; the first's release keeps it.
	m.RegisterPod(podRef("u2", "a", ""))
	m.UnregisterPod("u1")
	if !m.Registered(Key{ConfigMap, ns, "a"}) || m.Registered(Key{Secret, ns, "later"}) {
		t.Fatalf("after u1 left: configmap registered %v (want true), secret %v (want false)",
			m.Registered(Key{ConfigMap, ns, "a"}), m.Registered(Key{Secret, ns, "later"}))
	}
	m.UnregisterPod("u2")
	if m.Registered(Key{ConfigMap, ns, "a"}) {
		t.Fatal("configmap still registered after every pod left")
	}
	// Unregistered: read straight from the API server.
	if _, err := m.GetConfigMap(ctx, ns, "a"); !apierrors.IsNotFound(err) {
		t.Fatalf("GetConfigMap after unregister = %v; want NotFound", err)
	}
	if n.get("configmaps") != 1 {
		t.Errorf("GETs of configmaps = %d; want 1 (the read of an unregistered object)", n.get("configmaps"))
	}
	if n.list("configmaps") != 1 {
		t.Errorf("LISTs of configmaps = %d; want 1 (one watch, kept while a pod referenced it)", n.list("configmaps"))
	}
}

// A pod that changes what it references moves its registration: the new object
// is watched, the old one released.
func TestWatchReRegisterMovesReferences(t *testing.T) {
	client, n := newClient(t, cm("a", "1"), cm("b", "1"))
	m, err := New(kubeletconfigv1beta1.WatchChangeDetectionStrategy, client, clocktesting.NewFakeClock(time.Now()))
	if err != nil {
		t.Fatal(err)
	}
	run(t, m)
	m.RegisterPod(podRef("u1", "a", ""))
	waitWatches(t, n, "configmaps")
	m.RegisterPod(podRef("u1", "a", ""))
	m.RegisterPod(podRef("u1", "b", ""))
	waitWatches(t, n, "configmaps")
	if m.Registered(Key{ConfigMap, ns, "a"}) || !m.Registered(Key{ConfigMap, ns, "b"}) {
		t.Fatalf("after the move: a registered %v (want false), b %v (want true)",
			m.Registered(Key{ConfigMap, ns, "a"}), m.Registered(Key{ConfigMap, ns, "b"}))
	}
	if got, err := m.GetConfigMap(context.Background(), ns, "b"); err != nil || got.Name != "b" {
		t.Fatalf("GetConfigMap(b) = %v, %v", got, err)
	}
}

// An immutable object's watch stops once it was read; reads still serve it.
func TestWatchStopsForImmutable(t *testing.T) {
	obj := cm("frozen", "1")
	obj.Immutable = ptr.To(true)
	client, n := newClient(t, obj)
	m, err := New(kubeletconfigv1beta1.WatchChangeDetectionStrategy, client, clocktesting.NewFakeClock(time.Now()))
	if err != nil {
		t.Fatal(err)
	}
	run(t, m)
	m.RegisterPod(podRef("u1", "frozen", ""))
	waitWatches(t, n, "configmaps")
	if _, err := m.GetConfigMap(context.Background(), ns, "frozen"); err != nil {
		t.Fatal(err)
	}
	m.mu.Lock()
	stopped := m.items[Key{ConfigMap, ns, "frozen"}].stopWatch == nil
	m.mu.Unlock()
	if !stopped {
		t.Fatal("the watch of an immutable configmap still runs")
	}
	if got, err := m.GetConfigMap(context.Background(), ns, "frozen"); err != nil || got.Data["k"] != "1" {
		t.Fatalf("GetConfigMap after the stop = %v, %v", got, err)
	}
}

// Cache: reads within the TTL are served from the cache; the TTL passing, or
// the pod registering again (its next sync), reads again. NotFound is cached.
func TestCacheStrategy(t *testing.T) {
	ctx := context.Background()
	client, n := newClient(t, cm("a", "1"))
	clk := clocktesting.NewFakeClock(time.Now())
	var ttl atomic.Int64
	ttl.Store(int64(30 * time.Second))
	m, err := New(kubeletconfigv1beta1.TTLCacheChangeDetectionStrategy, client, clk,
		WithTTL(func() (time.Duration, bool) { return time.Duration(ttl.Load()), true }))
	if err != nil {
		t.Fatal(err)
	}
	run(t, m)
	pod := podRef("u1", "a", "missing")
	m.RegisterPod(pod)
	read := func(want string) {
		t.Helper()
		got, err := m.GetConfigMap(ctx, ns, "a")
		if err != nil || got.Data["k"] != want {
			t.Fatalf("GetConfigMap = %v, %v; want k=%s", got, err, want)
		}
	}
	read("1")
	read("1")
	if g := n.get("configmaps"); g != 1 {
		t.Fatalf("GETs = %d after two reads within the TTL; want 1", g)
	}
	for range 2 {
		if _, err := m.GetSecret(ctx, ns, "missing"); !apierrors.IsNotFound(err) {
			t.Fatalf("GetSecret = %v; want NotFound", err)
		}
	}
	if g := n.get("secrets"); g != 1 {
		t.Fatalf("secret GETs = %d; want 1 (NotFound is cached)", g)
	}

	if _, err := client.CoreV1().ConfigMaps(ns).Update(ctx, cm("a", "2"), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	read("1") // still fresh
	clk.Step(31 * time.Second)
	read("2")
	if _, err := client.CoreV1().ConfigMaps(ns).Update(ctx, cm("a", "3"), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	read("2")
	m.RegisterPod(pod) // the pod's next sync
	read("3")
	if g := n.get("configmaps"); g != 3 {
		t.Fatalf("GETs = %d; want 3 (first read, TTL passed, re-registration)", g)
	}
	// Without a node TTL, the default applies.
	ttl.Store(0)
	m2, _ := New(kubeletconfigv1beta1.TTLCacheChangeDetectionStrategy, client, clk)
	if m2.currentTTL() != DefaultTTL {
		t.Fatalf("TTL without a node annotation = %s; want %s", m2.currentTTL(), DefaultTTL)
	}
}

// Get: every read asks the API server, registered or not.
func TestGetStrategy(t *testing.T) {
	ctx := context.Background()
	client, n := newClient(t, cm("a", "1"))
	m, err := New(kubeletconfigv1beta1.GetChangeDetectionStrategy, client, clocktesting.NewFakeClock(time.Now()))
	if err != nil {
		t.Fatal(err)
	}
	run(t, m)
	m.RegisterPod(podRef("u1", "a", ""))
	for range 3 {
		if _, err := m.GetConfigMap(ctx, ns, "a"); err != nil {
			t.Fatal(err)
		}
	}
	if g := n.get("configmaps"); g != 3 {
		t.Fatalf("GETs = %d; want 3", g)
	}
	if n.list("configmaps") != 0 {
		t.Fatal("the Get strategy started a watch")
	}
	if _, err := m.GetConfigMap(ctx, ns, "nope"); !apierrors.IsNotFound(err) || err.Error() != `configmap "nope" not found` {
		t.Fatalf("GetConfigMap of a missing one = %v; want upstream's NotFound wording", err)
	}
}

func TestStandalone(t *testing.T) {
	m, err := New("", nil, clocktesting.NewFakeClock(time.Now()))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.GetConfigMap(context.Background(), ns, "a"); err == nil || apierrors.IsNotFound(err) {
		t.Fatalf("GetConfigMap without a client = %v; want a standalone-mode error", err)
	}
}
