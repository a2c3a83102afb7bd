package pleg

import (
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/cri"
)

const (
	evCreated = runtimeapi.ContainerEventType_CONTAINER_CREATED_EVENT
	evStarted = runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT
	evStopped = runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT
	evDeleted = runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT

	sbReady    = runtimeapi.PodSandboxState_SANDBOX_READY
	sbNotReady = runtimeapi.PodSandboxState_SANDBOX_NOTREADY
	cCreated   = runtimeapi.ContainerState_CONTAINER_CREATED
	cRunning   = runtimeapi.ContainerState_CONTAINER_RUNNING
	cExited    = runtimeapi.ContainerState_CONTAINER_EXITED
)

func sbStatus(id string, state runtimeapi.PodSandboxState, created int64, ip string) *runtimeapi.PodSandboxStatus {
	return &runtimeapi.PodSandboxStatus{
		Id: id, State: state, CreatedAt: created,
		Metadata: &runtimeapi.PodSandboxMetadata{Name: "pod", Namespace: "ns", Uid: "u"},
		Labels:   map[string]string{cri.LabelPodUID: "u", cri.LabelPodName: "pod", cri.LabelPodNamespace: "ns"},
		Network:  &runtimeapi.PodSandboxNetworkStatus{Ip: ip},
	}
}

func ctrStatus(id string, state runtimeapi.ContainerState, created int64) *runtimeapi.ContainerStatus {
	return &runtimeapi.ContainerStatus{Id: id, State: state, CreatedAt: created}
}

func cev(typ runtimeapi.ContainerEventType, id string, at int64, sb *runtimeapi.PodSandboxStatus, ctrs ...*runtimeapi.ContainerStatus) *runtimeapi.ContainerEventResponse {
	return &runtimeapi.ContainerEventResponse{ContainerId: id, ContainerEventType: typ, CreatedAt: at, PodSandboxStatus: sb, ContainersStatuses: ctrs}
}

func record(asOf int64, states map[string]plegState, order ...string) *podSnapshot {
	return &podSnapshot{uid: "u", name: "pod", namespace: "ns", states: states, order: order, asOf: time.Unix(0, asOf)}
}

func statusIDs(st *PodStatus) string {
	var ids []string
	for _, s := range st.Sandboxes {
		ids = append(ids, s.Id+"="+s.State.String())
	}
	for _, c := range st.Containers {
		ids = append(ids, c.Id+"="+c.State.String())
	}
	return strings.Join(ids, ",")
}

func TestEventPod(t *testing.T) {
	noLabel := sbStatus("sb", sbReady, 1, "")
	noLabel.Labels = nil
	metaOnly := sbStatus("sb", sbReady, 1, "")
	metaOnly.Labels = map[string]string{cri.LabelPodUID: "u"}
	for _, tc := range []struct {
		name string
		ev   *runtimeapi.ContainerEventResponse
		want podRef
		kind eventPodKind
	}{
		{"labelled sandbox", cev(evStarted, "c", 1, sbStatus("sb", sbReady, 1, "")), podRef{"u", "pod", "ns"}, eventOfPod},
		{"name from metadata", cev(evStarted, "c", 1, metaOnly), podRef{"u", "pod", "ns"}, eventOfPod},
		{"not nodelet's", cev(evStarted, "c", 1, noLabel), podRef{}, eventNotOurs},
		{"no sandbox status", cev(evDeleted, "c", 1, nil), podRef{}, eventNoSandbox},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, kind := eventPod(tc.ev)
			if got != tc.want || kind != tc.kind {
				t.Errorf("eventPod = %+v, %v; want %+v, %v", got, kind, tc.want, tc.kind)
			}
		})
	}
}

func TestDecideEvent(t *testing.T) {
	pod := podRef{"u", "pod", "ns"}
	sb := sbStatus("sb", sbReady, 10, "10.0.0.1")
	cachedRunning := &PodStatus{UID: "u", Sandboxes: []*runtimeapi.PodSandboxStatus{sb}, Containers: []*runtimeapi.ContainerStatus{ctrStatus("c", cRunning, 20)}, IPs: []string{"10.0.0.1"}}
	cachedExited := &PodStatus{UID: "u", Sandboxes: []*runtimeapi.PodSandboxStatus{sb}, Containers: []*runtimeapi.ContainerStatus{ctrStatus("c", cExited, 20)}, IPs: []string{"10.0.0.1"}}
	running := map[string]plegState{"sb": stateRunning, "c": stateRunning}
	exited := map[string]plegState{"sb": stateRunning, "c": stateExited}

	for _, tc := range []struct {
		name     string
		ev       *runtimeapi.ContainerEventResponse
		cached   *PodStatus
		cachedAt int64
		rec      *podSnapshot
		listedAt int64

		drop      bool
		events    []Event
		status    string // statusIDs of the new cached status; "" = cache left alone
		forget    bool
		recStates map[string]plegState
		recOrder  []string
	}{
		{
			name: "new pod: sandbox started",
			ev:   cev(evStarted, "sb", 100, sb), cached: &PodStatus{UID: "u"}, listedAt: 50,
			events: []Event{{"u", ContainerStarted, "sb"}}, status: "sb=SANDBOX_READY",
			recStates: map[string]plegState{"sb": stateRunning}, recOrder: []string{"sb"},
		},
		{
			name: "container created: cached, not announced",
			ev:   cev(evCreated, "c", 100, sb, ctrStatus("c", cCreated, 20)), cached: &PodStatus{UID: "u", Sandboxes: []*runtimeapi.PodSandboxStatus{sb}}, cachedAt: 50,
			rec:    record(50, map[string]plegState{"sb": stateRunning}, "sb"),
			status: "sb=SANDBOX_READY,c=CONTAINER_CREATED", recStates: map[string]plegState{"sb": stateRunning, "c": stateUnknown}, recOrder: []string{"sb", "c"},
		},
		{
			name: "container stopped",
			ev:   cev(evStopped, "c", 200, sb, ctrStatus("c", cExited, 20)), cached: cachedRunning, cachedAt: 100,
			rec:    record(100, running, "sb", "c"),
			events: []Event{{"u", ContainerDied, "c"}}, status: "sb=SANDBOX_READY,c=CONTAINER_EXITED",
			recStates: exited, recOrder: []string{"sb", "c"},
		},
		{
			name: "duplicate: the same event again",
			ev:   cev(evStopped, "c", 200, sb, ctrStatus("c", cExited, 20)), cached: cachedExited, cachedAt: 200,
			rec:  record(200, exited, "sb", "c"),
			drop: true,
		},
		{
			name: "out of order: a start older than the stop already applied",
			ev:   cev(evStarted, "c", 150, sb, ctrStatus("c", cRunning, 20)), cached: cachedExited, cachedAt: 200,
			rec:  record(200, exited, "sb", "c"),
			drop: true,
		},
		{
			name: "relist listed the stop first",
			ev:   cev(evStopped, "c", 250, sb, ctrStatus("c", cExited, 20)), cached: cachedExited, cachedAt: 300,
			rec:  record(300, exited, "sb", "c"),
			drop: true,
		},
		{
			name: "newer event, state already reported by the relist: no second event",
			ev:   cev(evStopped, "c", 350, sb, ctrStatus("c", cExited, 20)), cached: cachedExited, cachedAt: 300,
			rec:    record(300, exited, "sb", "c"),
			status: "sb=SANDBOX_READY,c=CONTAINER_EXITED", recStates: exited, recOrder: []string{"sb", "c"},
		},
		{
			name: "inspection newer than the event: event sent, cache kept",
			ev:   cev(evStopped, "c", 200, sb, ctrStatus("c", cExited, 20)), cached: cachedExited, cachedAt: 300,
			rec:    record(100, running, "sb", "c"),
			events: []Event{{"u", ContainerDied, "c"}}, recStates: exited, recOrder: []string{"sb", "c"},
		},
		{
			name:   "a lost event's change comes with the next one",
			ev:     cev(evStopped, "c", 200, sb, ctrStatus("c", cExited, 20), ctrStatus("d", cRunning, 30)),
			cached: cachedRunning, cachedAt: 100, rec: record(100, running, "sb", "c"),
			events:    []Event{{"u", ContainerDied, "c"}, {"u", ContainerStarted, "d"}},
			status:    "sb=SANDBOX_READY,d=CONTAINER_RUNNING,c=CONTAINER_EXITED",
			recStates: map[string]plegState{"sb": stateRunning, "c": stateExited, "d": stateRunning}, recOrder: []string{"sb", "c", "d"},
		},
		{
			name: "exited container deleted",
			ev:   cev(evDeleted, "c", 300, sb), cached: cachedExited, cachedAt: 200,
			rec:    record(200, exited, "sb", "c"),
			events: []Event{{"u", ContainerRemoved, "c"}}, status: "sb=SANDBOX_READY",
			recStates: map[string]plegState{"sb": stateRunning}, recOrder: []string{"sb"},
		},
		{
			name: "running container deleted: died, then removed",
			ev:   cev(evDeleted, "c", 300, sb), cached: cachedRunning, cachedAt: 200,
			rec:    record(200, running, "sb", "c"),
			events: []Event{{"u", ContainerDied, "c"}, {"u", ContainerRemoved, "c"}}, status: "sb=SANDBOX_READY",
			recStates: map[string]plegState{"sb": stateRunning}, recOrder: []string{"sb"},
		},
		{
			name:   "last sandbox deleted: the pod is forgotten",
			ev:     cev(evDeleted, "sb", 400, sbStatus("sb", sbNotReady, 10, "")),
			cached: &PodStatus{UID: "u", Sandboxes: []*runtimeapi.PodSandboxStatus{sbStatus("sb", sbNotReady, 10, "")}}, cachedAt: 300,
			rec:    record(300, map[string]plegState{"sb": stateExited}, "sb"),
			events: []Event{{"u", ContainerRemoved, "sb"}}, forget: true,
		},
		{
			name: "unknown pod older than the last listing",
			ev:   cev(evStarted, "sb", 100, sb), cached: &PodStatus{UID: "u"}, listedAt: 150,
			drop: true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var cachedAt time.Time
			if tc.cachedAt != 0 {
				cachedAt = time.Unix(0, tc.cachedAt)
			}
			var before map[string]plegState
			if tc.rec != nil {
				before = maps.Clone(tc.rec.states)
			}
			d := decideEvent(tc.ev, pod, tc.cached, cachedAt, tc.rec, time.Unix(0, tc.listedAt))
			if tc.rec != nil && !maps.Equal(before, tc.rec.states) {
				t.Errorf("the previous record was changed in place: %v, was %v", tc.rec.states, before)
			}
			if (d.drop != "") != tc.drop {
				t.Fatalf("drop = %q, want dropped %v", d.drop, tc.drop)
			}
			if tc.drop {
				if d.status != nil || d.record != nil || len(d.events) != 0 {
					t.Errorf("a dropped event changes something: %+v", d)
				}
				return
			}
			var got []Event
			for _, e := range d.events {
				got = append(got, *e)
			}
			if !slices.Equal(got, tc.events) {
				t.Errorf("events = %v, want %v", got, tc.events)
			}
			if d.forget != tc.forget {
				t.Errorf("forget = %v, want %v", d.forget, tc.forget)
			}
			switch {
			case tc.status == "" && !tc.forget && d.status != nil:
				t.Errorf("cache overwritten with %s; it was newer than the event", statusIDs(d.status))
			case tc.status != "" && (d.status == nil || statusIDs(d.status) != tc.status):
				t.Errorf("cached status = %v, want %s", d.status, tc.status)
			}
			if tc.forget {
				if d.record != nil {
					t.Errorf("forgotten pod keeps a record %+v", d.record)
				}
				return
			}
			if d.record == nil || !d.record.asOf.Equal(time.Unix(0, tc.ev.CreatedAt)) {
				t.Fatalf("record = %+v, want one as of the event", d.record)
			}
			if len(d.record.states) != len(tc.recStates) {
				t.Errorf("record states = %v, want %v", d.record.states, tc.recStates)
			}
			for id, s := range tc.recStates {
				if d.record.states[id] != s {
					t.Errorf("record states = %v, want %v", d.record.states, tc.recStates)
				}
			}
			if !slices.Equal(d.record.order, tc.recOrder) {
				t.Errorf("record order = %v, want %v", d.record.order, tc.recOrder)
			}
		})
	}
}

// TestMergeEvent covers what the event's partial view (one sandbox and its
// containers) does to the pod's full status.
func TestMergeEvent(t *testing.T) {
	pod := podRef{"u", "pod", "ns"}
	oldSb := sbStatus("old", sbNotReady, 10, "")
	newSb := sbStatus("new", sbReady, 20, "10.0.0.2")
	cached := &PodStatus{UID: "u",
		Sandboxes:  []*runtimeapi.PodSandboxStatus{sbStatus("new", sbReady, 20, "10.0.0.2"), oldSb},
		Containers: []*runtimeapi.ContainerStatus{ctrStatus("c2", cRunning, 40), ctrStatus("c1", cExited, 30)},
		IPs:        []string{"10.0.0.2"},
	}
	for _, tc := range []struct {
		name   string
		cached *PodStatus
		ev     *runtimeapi.ContainerEventResponse
		want   string
		ips    []string
	}{
		{
			name:   "a container in the cache and in the event is there once (kubernetes#121003)",
			cached: cached, ev: cev(evStopped, "c2", 100, newSb, ctrStatus("c2", cExited, 40)),
			want: "new=SANDBOX_READY,old=SANDBOX_NOTREADY,c2=CONTAINER_EXITED,c1=CONTAINER_EXITED", ips: []string{"10.0.0.2"},
		},
		{
			name:   "containers of an older sandbox are kept; new ones sorted in",
			cached: cached, ev: cev(evStarted, "c3", 100, newSb, ctrStatus("c2", cRunning, 40), ctrStatus("c3", cRunning, 50)),
			want: "new=SANDBOX_READY,old=SANDBOX_NOTREADY,c3=CONTAINER_RUNNING,c2=CONTAINER_RUNNING,c1=CONTAINER_EXITED", ips: []string{"10.0.0.2"},
		},
		{
			name:   "deleted container leaves",
			cached: cached, ev: cev(evDeleted, "c1", 100, newSb, ctrStatus("c2", cRunning, 40)),
			want: "new=SANDBOX_READY,old=SANDBOX_NOTREADY,c2=CONTAINER_RUNNING", ips: []string{"10.0.0.2"},
		},
		{
			name:   "deleted sandbox leaves",
			cached: cached, ev: cev(evDeleted, "old", 100, sbStatus("old", sbNotReady, 10, "")),
			want: "new=SANDBOX_READY,c2=CONTAINER_RUNNING,c1=CONTAINER_EXITED", ips: []string{"10.0.0.2"},
		},
		{
			name:   "stopped sandbox: the pod keeps its IP",
			cached: cached, ev: cev(evStopped, "new", 100, sbStatus("new", sbNotReady, 20, ""), ctrStatus("c2", cExited, 40)),
			want: "new=SANDBOX_NOTREADY,old=SANDBOX_NOTREADY,c2=CONTAINER_EXITED,c1=CONTAINER_EXITED", ips: []string{"10.0.0.2"},
		},
		{
			name:   "nothing cached",
			cached: &PodStatus{UID: "u"}, ev: cev(evStarted, "new", 100, newSb),
			want: "new=SANDBOX_READY", ips: []string{"10.0.0.2"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := mergeEvent(tc.cached, tc.ev, pod)
			if got := statusIDs(st); got != tc.want {
				t.Errorf("status = %s, want %s", got, tc.want)
			}
			if !slices.Equal(st.IPs, tc.ips) {
				t.Errorf("IPs = %v, want %v", st.IPs, tc.ips)
			}
			if st.UID != "u" || st.Name != "pod" || st.Namespace != "ns" {
				t.Errorf("pod = %s %s/%s", st.UID, st.Namespace, st.Name)
			}
		})
	}
	if len(cached.Containers) != 2 || cached.Containers[0].State != cRunning {
		t.Errorf("the cached status was changed in place: %s", statusIDs(cached))
	}
}

func TestStreamState(t *testing.T) {
	p := streamPolicy{maxFailures: 5, stableAfter: time.Minute, backoffBase: 100 * time.Millisecond, backoffMax: time.Second}
	unavailable := status.Error(codes.Unavailable, "runtime restarting")
	type step struct {
		connect  bool          // the next stream is established (else: it fails to open)
		uptime   time.Duration // how long it stays up before it ends
		err      error
		mode     streamMode // after it ended
		failures int
		wait     time.Duration
		gaveUp   bool
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{
			name: "five failures in a row fall back, with growing waits",
			steps: []step{
				{err: unavailable, mode: modeEvented, failures: 1, wait: 100 * time.Millisecond},
				{err: unavailable, mode: modeEvented, failures: 2, wait: 200 * time.Millisecond},
				{err: unavailable, mode: modeEvented, failures: 3, wait: 400 * time.Millisecond},
				{err: unavailable, mode: modeEvented, failures: 4, wait: 800 * time.Millisecond},
				{err: unavailable, mode: modeFallback, failures: 5, wait: time.Second},
				{err: unavailable, mode: modeFallback, failures: 6, wait: time.Second},
			},
		},
		{
			name: "a stable stream resets the count",
			steps: []step{
				{err: unavailable, mode: modeEvented, failures: 1, wait: 100 * time.Millisecond},
				{err: unavailable, mode: modeEvented, failures: 2, wait: 200 * time.Millisecond},
				{connect: true, uptime: time.Hour, err: unavailable, mode: modeEvented, failures: 1, wait: 100 * time.Millisecond},
			},
		},
		{
			name: "a flapping stream still falls back",
			steps: []step{
				{connect: true, err: unavailable, mode: modeEvented, failures: 1, wait: 100 * time.Millisecond},
				{connect: true, err: unavailable, mode: modeEvented, failures: 2, wait: 200 * time.Millisecond},
				{connect: true, err: unavailable, mode: modeEvented, failures: 3, wait: 400 * time.Millisecond},
				{connect: true, err: unavailable, mode: modeEvented, failures: 4, wait: 800 * time.Millisecond},
				{connect: true, err: unavailable, mode: modeFallback, failures: 5, wait: time.Second},
			},
		},
		{
			name: "re-established after the fallback: evented again, stable, reset",
			steps: []step{
				{err: unavailable, failures: 1, wait: 100 * time.Millisecond},
				{err: unavailable, failures: 2, wait: 200 * time.Millisecond},
				{err: unavailable, failures: 3, wait: 400 * time.Millisecond},
				{err: unavailable, failures: 4, wait: 800 * time.Millisecond},
				{err: unavailable, mode: modeFallback, failures: 5, wait: time.Second},
				{connect: true, uptime: 2 * time.Minute, err: errors.New("closed"), mode: modeEvented, failures: 1, wait: 100 * time.Millisecond},
			},
		},
		{
			name: "a runtime without the stream: fall back for good",
			steps: []step{
				{err: status.Error(codes.Unimplemented, "unknown method GetContainerEvents"), mode: modeFallback, failures: 1, gaveUp: true},
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := streamState{mode: modeEvented}
			for i, s := range tc.steps {
				if s.connect {
					st = st.connected()
					if st.mode != modeEvented {
						t.Fatalf("step %d: mode after connecting = %v", i, st.mode)
					}
				}
				next, wait := st.ended(p, s.err, s.uptime)
				if next.mode != s.mode || next.failures != s.failures || next.gaveUp != s.gaveUp || (!s.gaveUp && wait != s.wait) {
					t.Fatalf("step %d: ended = %+v, wait %v; want mode %v, failures %d, gaveUp %v, wait %v", i, next, wait, s.mode, s.failures, s.gaveUp, s.wait)
				}
				st = next
			}
		})
	}
}
