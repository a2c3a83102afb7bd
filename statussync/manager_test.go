package statussync

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	clienttesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/podutil"
	"github.com/nodelet/nodelet/internal/testsupport/eventually"
)

var t0 = time.Date(2026, 12, 2, 13, 0, 0, 0, time.UTC)

func testPod(name string, uid types.UID) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: uid,
			Annotations: map[string]string{podutil.AnnotationConfigSource: podutil.SourceAPI}},
		Spec:   v1.PodSpec{NodeName: "n", Containers: []v1.Container{{Name: "c", Image: "i"}}},
		Status: v1.PodStatus{Phase: v1.PodPending},
	}
}

func cond(t v1.PodConditionType, s v1.ConditionStatus, at time.Time) v1.PodCondition {
	return v1.PodCondition{Type: t, Status: s, LastTransitionTime: metav1.NewTime(at)}
}

func running(at time.Time) v1.PodStatus {
	st := metav1.NewTime(at)
	return v1.PodStatus{
		Phase:     v1.PodRunning,
		StartTime: &st,
		Conditions: []v1.PodCondition{
			cond(v1.PodReady, v1.ConditionTrue, at),
			cond(v1.ContainersReady, v1.ConditionTrue, at),
		},
		ContainerStatuses: []v1.ContainerStatus{{Name: "c", Ready: true,
			State: v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: st}}}},
	}
}

func succeeded(at time.Time) v1.PodStatus {
	st := metav1.NewTime(at)
	return v1.PodStatus{
		Phase:     v1.PodSucceeded,
		StartTime: &st,
		ContainerStatuses: []v1.ContainerStatus{{Name: "c",
			State: v1.ContainerState{Terminated: &v1.ContainerStateTerminated{ExitCode: 0, FinishedAt: st}}}},
	}
}

func verbs(client *fake.Clientset) []string {
	var out []string
	for _, a := range client.Actions() {
		v := a.GetVerb()
		if sub := a.GetSubresource(); sub != "" {
			v += "/" + sub
		}
		out = append(out, v)
	}
	return out
}

func wantVerbs(t *testing.T, client *fake.Clientset, want ...string) {
	t.Helper()
	got := verbs(client)
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("API calls %v, want %v", got, want)
	}
	client.ClearActions()
}

func apiStatus(t *testing.T, client *fake.Clientset, name string) v1.PodStatus {
	t.Helper()
	p, err := client.CoreV1().Pods("ns").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	client.ClearActions()
	return p.Status
}

func TestPatchOnlyOnChange(t *testing.T) {
	pod := testPod("p", "u1")
	client := fake.NewClientset(pod)
	clk := clocktesting.NewFakeClock(t0)
	m := NewManager(client, nil, clk)
	ctx := context.Background()

	m.SetPodStatus(pod, running(t0))
	m.syncBatch(ctx, false)
	wantVerbs(t, client, "get", "patch/status")
	if got := apiStatus(t, client, "p"); got.Phase != v1.PodRunning || len(got.Conditions) != 2 {
		t.Fatalf("API status %+v", got)
	}

	// The same status with only probe times moved is no change.
	again := running(t0)
	again.Conditions[0].LastProbeTime = metav1.NewTime(t0.Add(time.Minute))
	m.SetPodStatus(pod, again)
	m.syncBatch(ctx, false)
	wantVerbs(t, client)

	// The full batch does not re-read the pod for the caller's copy that was current at
	// the last sync...
	m.syncBatch(ctx, true)
	wantVerbs(t, client)
	// ...nor for a later copy that agrees with ours; a later copy that does not is
	// written against, once, without reading the pod: the watch's copy is the base.
	newer := pod.DeepCopy()
	newer.ResourceVersion = "999"
	newer.Status = running(t0)
	m.SetPodStatus(newer, again)
	m.syncBatch(ctx, true)
	wantVerbs(t, client)
	newer.Status.Phase = v1.PodPending
	m.SetPodStatus(newer, again)
	m.syncBatch(ctx, true)
	wantVerbs(t, client, "patch/status")
	m.syncBatch(ctx, true)
	wantVerbs(t, client)

	// A real change is written, against the copy last written: no read first.
	notReady := running(t0)
	notReady.Conditions[0] = cond(v1.PodReady, v1.ConditionFalse, t0.Add(time.Minute))
	m.SetPodStatus(newer, notReady)
	m.syncBatch(ctx, false)
	wantVerbs(t, client, "patch/status")
	if got := apiStatus(t, client, "p"); findCond(got, v1.PodReady).Status != v1.ConditionFalse {
		t.Errorf("Ready not written: %+v", got.Conditions)
	}
}

func TestPatchContentAndMerge(t *testing.T) {
	pod := testPod("p", "u1")
	apiStart := metav1.NewTime(t0.Add(-time.Hour))
	pod.Status = v1.PodStatus{
		Phase:     v1.PodPending,
		StartTime: &apiStart,
		Conditions: []v1.PodCondition{
			cond(v1.PodScheduled, v1.ConditionTrue, t0.Add(-2*time.Hour)),
			cond("example.com/gate", v1.ConditionTrue, t0.Add(-2*time.Hour)),
			cond(v1.DisruptionTarget, v1.ConditionTrue, t0.Add(-time.Minute)),
			cond(v1.PodReadyToStartContainers, v1.ConditionTrue, t0.Add(-time.Minute)), // ours, now dropped
			cond(v1.PodResizeInProgress, v1.ConditionTrue, t0.Add(-time.Minute)),       // a resize done since
		},
		NominatedNodeName: "n",
	}
	client := fake.NewClientset(pod)
	m := NewManager(client, nil, clocktesting.NewFakeClock(t0))

	ours := running(t0)
	ours.Conditions = append(ours.Conditions, cond(v1.PodScheduled, v1.ConditionFalse, t0))
	m.SetPodStatus(pod, ours)
	m.syncBatch(context.Background(), false)

	var patch []byte
	for _, a := range client.Actions() {
		if p, ok := a.(clienttesting.PatchAction); ok {
			patch = p.GetPatch()
			if p.GetPatchType() != types.StrategicMergePatchType {
				t.Errorf("patch type %s", p.GetPatchType())
			}
		}
	}
	if !strings.Contains(string(patch), `"uid":"u1"`) {
		t.Errorf("patch %s carries no UID precondition", patch)
	}
	got := apiStatus(t, client, "p")
	byType := map[v1.PodConditionType]v1.ConditionStatus{}
	for _, c := range got.Conditions {
		byType[c.Type] = c.Status
	}
	want := map[v1.PodConditionType]v1.ConditionStatus{
		v1.PodScheduled:     v1.ConditionTrue, // the scheduler's, not ours
		"example.com/gate":  v1.ConditionTrue,
		v1.DisruptionTarget: v1.ConditionTrue,
		v1.PodReady:         v1.ConditionTrue,
		v1.ContainersReady:  v1.ConditionTrue,
	}
	if len(byType) != len(want) {
		t.Errorf("conditions %v, want %v", byType, want)
	}
	for k, v := range want {
		if byType[k] != v {
			t.Errorf("condition %s = %q, want %q", k, byType[k], v)
		}
	}
	if got.StartTime == nil || !got.StartTime.Equal(&apiStart) {
		t.Errorf("startTime %v, want the API's %v", got.StartTime, apiStart)
	}
	if got.NominatedNodeName != "n" {
		t.Errorf("nominatedNodeName %q dropped", got.NominatedNodeName)
	}
}

func TestLocalStatusRules(t *testing.T) {
	pod := testPod("p", "u1")
	clk := clocktesting.NewFakeClock(t0)
	m := NewManager(nil, nil, clk) // standalone

	first := running(t0)
	first.Conditions = append(first.Conditions, v1.PodCondition{Type: v1.PodInitialized, Status: v1.ConditionTrue})
	m.SetPodStatus(pod, first)
	got, ok := m.GetPodStatus("u1")
	if !ok || got.Phase != v1.PodRunning {
		t.Fatalf("GetPodStatus = %v, %v", got.Phase, ok)
	}
	if init := findCond(got, v1.PodInitialized); !init.LastTransitionTime.Time.Equal(t0) {
		t.Errorf("zero transition time filled with %v, want now %v", init.LastTransitionTime, t0)
	}

	clk.Step(time.Minute)
	second := running(t0.Add(time.Minute)) // another startTime, same condition statuses
	second.Conditions = append(second.Conditions, v1.PodCondition{Type: v1.PodInitialized, Status: v1.ConditionTrue})
	m.SetPodStatus(pod, second)
	got, _ = m.GetPodStatus("u1")
	if !got.StartTime.Time.Equal(t0) {
		t.Errorf("startTime moved to %v", got.StartTime)
	}
	if init := findCond(got, v1.PodInitialized); !init.LastTransitionTime.Time.Equal(t0) {
		t.Errorf("transition time of an unchanged condition reset to %v", init.LastTransitionTime)
	}
	if ready := findCond(got, v1.PodReady); !ready.LastTransitionTime.Time.Equal(t0.Add(time.Minute)) {
		t.Errorf("a transition time set by the caller was changed to %v", ready.LastTransitionTime)
	}

	m.SetPodStatus(pod, succeeded(t0))
	m.SetPodStatus(pod, running(t0))
	if got, _ := m.GetPodStatus("u1"); got.Phase != v1.PodSucceeded {
		t.Errorf("phase %s after terminal→running, want Succeeded", got.Phase)
	}

	// A pod the API already has terminal is not moved back either.
	failed := testPod("q", "u2")
	failed.Status.Phase = v1.PodFailed
	m.SetPodStatus(failed, running(t0))
	if _, ok := m.GetPodStatus("u2"); ok {
		t.Error("stored a running status for a pod that is Failed in the API")
	}

	// A pod put back under the same UID (a static pod's manifest restored) starts
	// a new life once the loop forgets the old one.
	m.ForgetPodStatus("u1")
	if _, ok := m.GetPodStatus("u1"); ok {
		t.Error("status kept after ForgetPodStatus")
	}
	m.SetPodStatus(pod, running(t0))
	if got, _ := m.GetPodStatus("u1"); got.Phase != v1.PodRunning {
		t.Errorf("phase %s after the old life was forgotten, want Running", got.Phase)
	}

	m.RemoveOrphanedStatuses(map[types.UID]bool{"u2": true})
	if _, ok := m.GetPodStatus("u1"); ok {
		t.Error("orphaned status kept")
	}
	stopped, stop := context.WithCancel(context.Background())
	stop()
	m.Run(stopped) // without a client it only waits for ctx
}

func findCond(s v1.PodStatus, t v1.PodConditionType) v1.PodCondition {
	for _, c := range s.Conditions {
		if c.Type == t {
			return c
		}
	}
	return v1.PodCondition{}
}

func TestTerminalInAPIIsNotOverwritten(t *testing.T) {
	pod := testPod("p", "u1")
	inAPI := pod.DeepCopy()
	inAPI.Status = succeeded(t0)
	client := fake.NewClientset(inAPI)
	m := NewManager(client, nil, clocktesting.NewFakeClock(t0))
	m.SetPodStatus(pod, running(t0)) // the caller's copy is stale (Pending)
	m.syncBatch(context.Background(), false)
	wantVerbs(t, client, "get")
	if got := apiStatus(t, client, "p"); got.Phase != v1.PodSucceeded {
		t.Errorf("API phase %s, want Succeeded", got.Phase)
	}
}

func TestTerminalPhaseWaitsForContainers(t *testing.T) {
	pod := testPod("p", "u1")
	client := fake.NewClientset(pod)
	m := NewManager(client, nil, clocktesting.NewFakeClock(t0))
	ctx := context.Background()
	st := running(t0)
	st.Phase = v1.PodFailed // but a container still runs
	m.SetPodStatus(pod, st)
	m.syncBatch(ctx, false)
	if got := apiStatus(t, client, "p"); got.Phase != v1.PodPending {
		t.Errorf("API phase %s while a container runs, want the old Pending", got.Phase)
	}
	m.SetPodStatus(pod, succeeded(t0))
	m.syncBatch(ctx, false)
	if got := apiStatus(t, client, "p"); got.Phase != v1.PodSucceeded {
		t.Errorf("API phase %s, want Succeeded", got.Phase)
	}
}

type mirrorMap map[types.UID]*v1.Pod

func (mm mirrorMap) MirrorPod(uid types.UID) (*v1.Pod, bool) {
	p, ok := mm[uid]
	return p, ok
}

func TestStaticPodStatusGoesToMirror(t *testing.T) {
	static := testPod("web-n", "static-uid")
	static.Annotations[podutil.AnnotationConfigSource] = podutil.SourceFile
	mirror := testPod("web-n", "mirror-uid")
	mirror.Annotations = map[string]string{podutil.AnnotationConfigMirror: "static-uid"}
	client := fake.NewClientset(mirror)
	mirrors := mirrorMap{}
	m := NewManager(client, mirrors, clocktesting.NewFakeClock(t0))
	ctx := context.Background()

	m.SetPodStatus(static, running(t0))
	m.syncBatch(ctx, false)
	wantVerbs(t, client) // no mirror known yet: nothing written, kept for later

	mirrors["static-uid"] = mirror
	m.syncBatch(ctx, false)
	var patch string
	for _, a := range client.Actions() {
		if p, ok := a.(clienttesting.PatchAction); ok {
			patch = string(p.GetPatch())
			if p.GetName() != "web-n" {
				t.Errorf("patched %s", p.GetName())
			}
		}
	}
	wantVerbs(t, client, "get", "patch/status")
	if !strings.Contains(patch, `"uid":"mirror-uid"`) {
		t.Errorf("patch %s does not carry the mirror's UID", patch)
	}
	if got := apiStatus(t, client, "web-n"); got.Phase != v1.PodRunning {
		t.Errorf("mirror phase %s", got.Phase)
	}
	if got, ok := m.GetPodStatus("static-uid"); !ok || got.Phase != v1.PodRunning {
		t.Errorf("status not kept under the static UID")
	}

	// The mirror is replaced (new UID, empty status): once the lookup knows the new
	// mirror, the periodic batch writes the status to it.
	if err := client.CoreV1().Pods("ns").Delete(ctx, "web-n", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	client.ClearActions()
	m.SetPodStatus(static, running(t0.Add(time.Minute)))
	m.syncBatch(ctx, false) // old mirror is gone: nothing written, not given up
	wantVerbs(t, client, "get")
	replacement := testPod("web-n", "mirror-uid-2")
	replacement.Annotations = map[string]string{podutil.AnnotationConfigMirror: "static-uid"}
	if _, err := client.CoreV1().Pods("ns").Create(ctx, replacement, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	client.ClearActions()
	mirrors["static-uid"] = replacement
	m.syncBatch(ctx, true)
	wantVerbs(t, client, "get", "patch/status")
	if got := apiStatus(t, client, "web-n"); got.Phase != v1.PodRunning {
		t.Errorf("new mirror phase %s", got.Phase)
	}
}

func TestDeleteWhenReclaimed(t *testing.T) {
	pod := testPod("p", "u1")
	now := metav1.NewTime(t0)
	grace := int64(30)
	pod.DeletionTimestamp, pod.DeletionGracePeriodSeconds = &now, &grace
	client := fake.NewClientset(pod)
	var reclaimed atomic.Bool
	var asked atomic.Int32
	m := NewManager(client, nil, clocktesting.NewFakeClock(t0), WithDeleteWhenReclaimed(func(p *v1.Pod) bool {
		asked.Add(1)
		if p.UID != "u1" || p.DeletionTimestamp == nil {
			t.Errorf("canDelete got %s with deletionTimestamp %v", p.UID, p.DeletionTimestamp)
		}
		return reclaimed.Load()
	}))
	ctx := context.Background()

	m.SetPodStatus(pod, succeeded(t0))
	m.syncBatch(ctx, false)
	wantVerbs(t, client, "get", "patch/status")
	if asked.Load() == 0 {
		t.Fatal("canDelete never asked")
	}

	reclaimed.Store(true)
	m.syncBatch(ctx, false) // nothing changed, but the deletion is now due
	var del clienttesting.DeleteAction
	for _, a := range client.Actions() {
		if d, ok := a.(clienttesting.DeleteAction); ok {
			del = d
		}
	}
	wantVerbs(t, client, "get", "delete")
	o := del.GetDeleteOptions()
	if o.GracePeriodSeconds == nil || *o.GracePeriodSeconds != 0 || o.Preconditions == nil || o.Preconditions.UID == nil || *o.Preconditions.UID != "u1" {
		t.Errorf("delete options %+v, want grace 0 with UID precondition u1", o)
	}
	m.syncBatch(ctx, true)
	wantVerbs(t, client) // done with it
}

func TestNotFoundIsQuiet(t *testing.T) {
	client := fake.NewClientset()
	m := NewManager(client, nil, clocktesting.NewFakeClock(t0))
	m.SetPodStatus(testPod("gone", "u1"), running(t0))
	m.syncBatch(context.Background(), false)
	wantVerbs(t, client, "get")
	m.syncBatch(context.Background(), true)
	wantVerbs(t, client) // not retried
	if _, ok := m.GetPodStatus("u1"); !ok {
		t.Error("local status dropped")
	}
}

func TestReplacedPodIsNotPatched(t *testing.T) {
	client := fake.NewClientset(testPod("p", "other-uid"))
	m := NewManager(client, nil, clocktesting.NewFakeClock(t0))
	m.SetPodStatus(testPod("p", "u1"), running(t0))
	m.syncBatch(context.Background(), false)
	wantVerbs(t, client, "get")
}

func TestConflictRefetches(t *testing.T) {
	pod := testPod("p", "u1")
	client := fake.NewClientset(pod)
	var conflicts atomic.Int32
	client.PrependReactor("patch", "pods", func(clienttesting.Action) (bool, runtime.Object, error) {
		if conflicts.Add(1) == 1 {
			return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "pods"}, "p", errors.New("changed"))
		}
		return false, nil, nil
	})
	m := NewManager(client, nil, clocktesting.NewFakeClock(t0))
	m.SetPodStatus(pod, running(t0))
	m.syncBatch(context.Background(), false)
	wantVerbs(t, client, "get", "patch/status", "get", "patch/status")
	if got := apiStatus(t, client, "p"); got.Phase != v1.PodRunning {
		t.Errorf("phase %s after retry", got.Phase)
	}
}

func TestRunSyncsAndMeasures(t *testing.T) {
	pod := testPod("p", "u1")
	client := fake.NewClientset(pod)
	clk := clocktesting.NewFakeClock(t0)
	reg := prometheus.NewRegistry()
	m := NewManager(client, nil, clk, WithMetrics(reg))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); m.Run(ctx) }()
	defer func() { cancel(); <-done }()

	m.SetPodStatus(pod, running(t0))
	eventually.True(t, "the Running status in the API", func() bool { return apiStatusQuiet(client, "p").Phase == v1.PodRunning })
	eventually.True(t, "a sync duration sample", func() bool {
		n, _ := testutil.GatherAndCount(reg, "kubelet_pod_status_sync_duration_seconds")
		return n == 1
	})

	// An edit made in the API behind our back is repaired by the periodic batch.
	p, _ := client.CoreV1().Pods("ns").Get(ctx, "p", metav1.GetOptions{})
	p.Status.Phase = v1.PodPending
	p, err := client.CoreV1().Pods("ns").UpdateStatus(ctx, p, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.ResourceVersion = "2"        // the fake tracker sets none; the API server always does
	m.SetPodStatus(p, running(t0)) // the caller sees the API's new copy; our status is unchanged
	eventually.True(t, "the batch timer", clk.HasWaiters)
	clk.Step(BatchPeriod)
	eventually.True(t, "the Running status in the API", func() bool { return apiStatusQuiet(client, "p").Phase == v1.PodRunning })
}

func apiStatusQuiet(client *fake.Clientset, name string) v1.PodStatus {
	p, err := client.Tracker().Get(schema.GroupVersionResource{Version: "v1", Resource: "pods"}, "ns", name)
	if err != nil {
		return v1.PodStatus{}
	}
	return p.(*v1.Pod).Status
}

func TestStatusPatchIsMinimal(t *testing.T) {
	old := running(t0)
	new := running(t0)
	new.Conditions[0].Status = v1.ConditionFalse
	patch, err := statusPatch("u1", &old, &new)
	if err != nil {
		t.Fatal(err)
	}
	s := string(patch)
	if strings.Contains(s, "containerStatuses") || !strings.Contains(s, `"status":"False"`) {
		t.Errorf("patch %s, want only the changed condition", s)
	}
}

// Init container statuses reach the API in spec order, as upstream writes them:
// kubectl's Init:N/M and controllers read them by position. App containers go by
// name, as upstream sorts them.
func TestContainerStatusOrder(t *testing.T) {
	pod := testPod("p", "u1")
	pod.Spec.InitContainers = []v1.Container{{Name: "setup"}, {Name: "migrate"}, {Name: "await-db"}}
	pod.Spec.Containers = []v1.Container{{Name: "web"}, {Name: "db"}}
	client := fake.NewClientset(pod)
	m := NewManager(client, nil, clocktesting.NewFakeClock(t0))

	st := running(t0)
	done := v1.ContainerState{Terminated: &v1.ContainerStateTerminated{ExitCode: 0}}
	st.InitContainerStatuses = []v1.ContainerStatus{{Name: "setup", State: done}, {Name: "migrate", State: done}, {Name: "await-db", State: done}}
	st.ContainerStatuses = []v1.ContainerStatus{{Name: "web"}, {Name: "db"}}
	m.SetPodStatus(pod, st)
	m.syncBatch(context.Background(), false)

	got := apiStatus(t, client, "p")
	names := func(list []v1.ContainerStatus) []string {
		var out []string
		for _, c := range list {
			out = append(out, c.Name)
		}
		return out
	}
	if g, w := names(got.InitContainerStatuses), []string{"setup", "migrate", "await-db"}; strings.Join(g, ",") != strings.Join(w, ",") {
		t.Errorf("init container statuses in the API: %v, want spec order %v", g, w)
	}
	if g, w := names(got.ContainerStatuses), []string{"db", "web"}; strings.Join(g, ",") != strings.Join(w, ",") {
		t.Errorf("container statuses in the API: %v, want by name %v", g, w)
	}
	// Read back, the status compares equal to ours: no second patch.
	m.SetPodStatus(pod, st)
	m.syncBatch(context.Background(), true)
	wantVerbs(t, client)
}

// versioned makes the fake API server give each write a new resourceVersion, as the
// real one does.
func versioned(client *fake.Clientset) *atomic.Int64 {
	rv := &atomic.Int64{}
	rv.Store(100)
	react := clienttesting.ObjectReaction(client.Tracker())
	client.PrependReactor("patch", "pods", func(a clienttesting.Action) (bool, runtime.Object, error) {
		handled, obj, err := react(a)
		if err != nil || !handled {
			return handled, obj, err
		}
		p := obj.(*v1.Pod).DeepCopy()
		p.ResourceVersion = strconv.FormatInt(rv.Add(1), 10)
		if err := client.Tracker().Update(schema.GroupVersionResource{Version: "v1", Resource: "pods"}, p, p.Namespace); err != nil {
			return true, nil, err
		}
		return true, p, nil
	})
	return rv
}

func TestWritesWithoutReading(t *testing.T) {
	pod := testPod("p", "u1")
	pod.ResourceVersion = "7"
	client := fake.NewClientset(pod)
	rv := versioned(client)
	m := NewManager(client, nil, clocktesting.NewFakeClock(t0))
	ctx := context.Background()

	// The watch's copy is the base of the first write, our write's answer of the next.
	m.SetPodStatus(pod, running(t0))
	m.syncBatch(ctx, false)
	wantVerbs(t, client, "patch/status")
	notReady := running(t0)
	notReady.Conditions[0] = cond(v1.PodReady, v1.ConditionFalse, t0.Add(time.Minute))
	m.SetPodStatus(pod, notReady) // the caller's copy is still the older one
	m.syncBatch(ctx, false)
	wantVerbs(t, client, "patch/status")
	if got := apiStatus(t, client, "p"); findCond(got, v1.PodReady).Status != v1.ConditionFalse || got.Phase != v1.PodRunning {
		t.Fatalf("API status %+v", got)
	}

	// A newer watch copy (someone else wrote) is the base instead of our last answer.
	inAPI, err := client.Tracker().Get(schema.GroupVersionResource{Version: "v1", Resource: "pods"}, "ns", "p")
	if err != nil {
		t.Fatal(err)
	}
	newer := inAPI.(*v1.Pod).DeepCopy()
	newer.ResourceVersion = strconv.FormatInt(rv.Add(1), 10)
	newer.Status.Conditions = append(newer.Status.Conditions, v1.PodCondition{Type: v1.DisruptionTarget, Status: v1.ConditionTrue})
	if err := client.Tracker().Update(schema.GroupVersionResource{Version: "v1", Resource: "pods"}, newer, "ns"); err != nil {
		t.Fatal(err)
	}
	client.ClearActions()
	m.SetPodStatus(newer, running(t0.Add(2*time.Minute)))
	m.syncBatch(ctx, false)
	wantVerbs(t, client, "patch/status")
	got := apiStatus(t, client, "p")
	if findCond(got, v1.PodReady).Status != v1.ConditionTrue || findCond(got, v1.DisruptionTarget).Status != v1.ConditionTrue {
		t.Errorf("API conditions %+v: want Ready written and DisruptionTarget kept", got.Conditions)
	}

	// A pod replaced under the same name fails the patch's UID precondition (a
	// Conflict): the pod is read, found replaced, and no longer written.
	client.PrependReactor("patch", "pods", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "pods"}, "p", errors.New("Precondition failed: UID in precondition: u1, UID in object meta: u2"))
	})
	replaced := testPod("p", "u2")
	if err := client.Tracker().Update(schema.GroupVersionResource{Version: "v1", Resource: "pods"}, replaced, "ns"); err != nil {
		t.Fatal(err)
	}
	client.ClearActions()
	m.SetPodStatus(newer, notReady)
	m.syncBatch(ctx, false)
	wantVerbs(t, client, "patch/status", "get")
	m.SetPodStatus(newer, running(t0.Add(3*time.Minute)))
	m.syncBatch(ctx, true)
	wantVerbs(t, client)
}

func TestBatchWritesConcurrently(t *testing.T) {
	// A real client against a test server: the fake clientset runs one call at a time.
	const n = 3 * syncWorkers
	var inFlight, most atomic.Int32
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPatch || !strings.HasSuffix(r.URL.Path, "/status") {
			t.Errorf("unexpected %s %s", r.Method, r.URL.Path)
			http.Error(w, "unexpected", http.StatusBadRequest)
			return
		}
		now := inFlight.Add(1)
		defer inFlight.Add(-1)
		for {
			m := most.Load()
			if now <= m || most.CompareAndSwap(m, now) {
				break
			}
		}
		<-release
		name := path.Base(path.Dir(r.URL.Path))
		p := testPod(name, types.UID("u"+strings.TrimPrefix(name, "p")))
		p.ResourceVersion = "2"
		p.Status = running(t0)
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(p)
	}))
	defer srv.Close()
	client, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL, QPS: -1})
	if err != nil {
		t.Fatal(err)
	}
	m := NewManager(client, nil, clocktesting.NewFakeClock(t0))
	for i := range n {
		p := testPod(fmt.Sprintf("p%d", i), types.UID(fmt.Sprintf("u%d", i)))
		p.ResourceVersion = "1"
		m.SetPodStatus(p, running(t0))
	}
	done := make(chan struct{})
	go func() { defer close(done); m.syncBatch(context.Background(), false) }()
	eventually.True(t, "all workers writing", func() bool { return inFlight.Load() == syncWorkers })
	close(release)
	<-done
	if most.Load() != syncWorkers {
		t.Errorf("at most %d writes in flight, want %d", most.Load(), syncWorkers)
	}
	m.syncBatch(context.Background(), true) // all synced: nothing more to write
}
