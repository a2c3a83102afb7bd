package podstatus

import (
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/cri"
	"github.com/nodelet/nodelet/pleg"
)

var now = time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)

func pod(policy v1.RestartPolicy, names ...string) *v1.Pod {
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u"}, Spec: v1.PodSpec{RestartPolicy: policy}}
	for _, n := range names {
		p.Spec.Containers = append(p.Spec.Containers, v1.Container{Name: n, Image: "img"})
	}
	return p
}

func cs(name string, state runtimeapi.ContainerState, exit int32, created int64, restarts string) *runtimeapi.ContainerStatus {
	return &runtimeapi.ContainerStatus{
		Id: name + "-" + restarts, State: state, ExitCode: exit, CreatedAt: created,
		StartedAt: now.Add(-time.Minute).UnixNano(), FinishedAt: now.UnixNano(), ImageRef: "sha256:abc",
		Labels:      map[string]string{cri.LabelContainerName: name},
		Annotations: map[string]string{cri.AnnotationContainerRestartCount: restarts},
	}
}

func sandbox() []*runtimeapi.PodSandboxStatus {
	return []*runtimeapi.PodSandboxStatus{{Id: "sb", State: runtimeapi.PodSandboxState_SANDBOX_READY}}
}

func TestPhase(t *testing.T) {
	run, exit := runtimeapi.ContainerState_CONTAINER_RUNNING, runtimeapi.ContainerState_CONTAINER_EXITED
	tests := []struct {
		name     string
		pod      *v1.Pod
		ctrs     []*runtimeapi.ContainerStatus
		terminal bool
		want     v1.PodPhase
	}{
		{"nothing yet", pod(v1.RestartPolicyAlways, "a"), nil, false, v1.PodPending},
		{"running", pod(v1.RestartPolicyAlways, "a"), []*runtimeapi.ContainerStatus{cs("a", run, 0, 1, "0")}, false, v1.PodRunning},
		{"one of two running", pod(v1.RestartPolicyAlways, "a", "b"), []*runtimeapi.ContainerStatus{cs("a", run, 0, 1, "0")}, false, v1.PodPending},
		{"Always: exited is restarting", pod(v1.RestartPolicyAlways, "a"), []*runtimeapi.ContainerStatus{cs("a", exit, 1, 1, "0")}, false, v1.PodRunning},
		{"Never: success", pod(v1.RestartPolicyNever, "a"), []*runtimeapi.ContainerStatus{cs("a", exit, 0, 1, "0")}, false, v1.PodSucceeded},
		{"Never: failure", pod(v1.RestartPolicyNever, "a", "b"), []*runtimeapi.ContainerStatus{cs("a", exit, 0, 1, "0"), cs("b", exit, 2, 1, "0")}, false, v1.PodFailed},
		{"OnFailure: failure restarts", pod(v1.RestartPolicyOnFailure, "a"), []*runtimeapi.ContainerStatus{cs("a", exit, 2, 1, "0")}, false, v1.PodRunning},
		{"OnFailure: success", pod(v1.RestartPolicyOnFailure, "a"), []*runtimeapi.ContainerStatus{cs("a", exit, 0, 1, "0")}, false, v1.PodSucceeded},
		{"deleted Always pod killed by SIGTERM fails", pod(v1.RestartPolicyAlways, "a"), []*runtimeapi.ContainerStatus{cs("a", exit, 143, 1, "0")}, true, v1.PodFailed},
		{"deleted Always pod exiting 0 succeeds", pod(v1.RestartPolicyAlways, "a"), []*runtimeapi.ContainerStatus{cs("a", exit, 0, 1, "0")}, true, v1.PodSucceeded},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := Generate(Input{Pod: tt.pod, Runtime: &pleg.PodStatus{UID: "u", Sandboxes: sandbox(), Containers: tt.ctrs, IPs: []string{"10.0.0.2"}}, Now: now, Terminal: tt.terminal})
			if s.Phase != tt.want {
				t.Fatalf("phase = %s, want %s (statuses %+v)", s.Phase, tt.want, s.ContainerStatuses)
			}
		})
	}
}

func TestContainerStatusAndConditions(t *testing.T) {
	p := pod(v1.RestartPolicyAlways, "a")
	rt := &pleg.PodStatus{UID: "u", Sandboxes: sandbox(), IPs: []string{"10.244.0.7"}, Containers: []*runtimeapi.ContainerStatus{
		cs("a", runtimeapi.ContainerState_CONTAINER_RUNNING, 0, 2, "3"),
		cs("a", runtimeapi.ContainerState_CONTAINER_EXITED, 1, 1, "2"),
	}}
	s := Generate(Input{Pod: p, Runtime: rt, Now: now, RuntimeName: "containerd", HostIPs: []string{"192.0.2.1"}})
	c := s.ContainerStatuses[0]
	if c.RestartCount != 3 || c.State.Running == nil || !c.Ready || c.ContainerID != "containerd://a-3" || c.ImageID != "sha256:abc" {
		t.Fatalf("container status = %+v", c)
	}
	if c.LastTerminationState.Terminated == nil || c.LastTerminationState.Terminated.ExitCode != 1 || c.LastTerminationState.Terminated.Reason != "Error" {
		t.Fatalf("lastState = %+v, want the previous instance's exit", c.LastTerminationState)
	}
	if s.PodIP != "10.244.0.7" || s.HostIP != "192.0.2.1" || s.StartTime == nil {
		t.Fatalf("ips/startTime = %q %q %v", s.PodIP, s.HostIP, s.StartTime)
	}
	want := map[v1.PodConditionType]v1.ConditionStatus{
		v1.PodReady: v1.ConditionTrue, v1.ContainersReady: v1.ConditionTrue, v1.PodInitialized: v1.ConditionTrue,
		v1.PodReadyToStartContainers: v1.ConditionTrue, v1.PodScheduled: v1.ConditionTrue,
	}
	for _, cond := range s.Conditions {
		if want[cond.Type] != cond.Status {
			t.Errorf("condition %s = %s, want %s", cond.Type, cond.Status, want[cond.Type])
		}
	}

	// A later generation keeps transition times of unchanged conditions and
	// keeps conditions other components own.
	later := now.Add(time.Minute)
	prev := s
	prev.Conditions = append(prev.Conditions, v1.PodCondition{Type: "example.com/Gate", Status: v1.ConditionTrue})
	s2 := Generate(Input{Pod: p, Runtime: rt, Previous: prev, Now: later})
	foreign := false
	for _, cond := range s2.Conditions {
		if cond.Type == "example.com/Gate" {
			foreign = true
			continue
		}
		if !cond.LastTransitionTime.Time.Equal(now) {
			t.Errorf("condition %s transition time moved to %v", cond.Type, cond.LastTransitionTime)
		}
	}
	if !foreign {
		t.Error("a condition owned by another component was dropped")
	}
	if !s2.StartTime.Equal(s.StartTime) {
		t.Error("startTime must stay stable")
	}
}

func TestWaitingReasonsAndTerminalStickiness(t *testing.T) {
	p := pod(v1.RestartPolicyAlways, "a")
	rt := &pleg.PodStatus{UID: "u", Sandboxes: sandbox(), IPs: []string{"10.244.0.7"}, Containers: []*runtimeapi.ContainerStatus{
		cs("a", runtimeapi.ContainerState_CONTAINER_EXITED, 1, 1, "4"),
	}}
	s := Generate(Input{Pod: p, Runtime: rt, Now: now, Waiting: map[string]Waiting{"a": {Reason: "CrashLoopBackOff", Message: "back-off 40s"}}})
	c := s.ContainerStatuses[0]
	if c.State.Waiting == nil || c.State.Waiting.Reason != "CrashLoopBackOff" || c.LastTerminationState.Terminated == nil {
		t.Fatalf("container status = %+v, want waiting CrashLoopBackOff with last termination", c)
	}
	if s.Phase != v1.PodRunning {
		t.Fatalf("phase = %s, want Running for a crash-looping Always pod", s.Phase)
	}
	failed := v1.PodStatus{Phase: v1.PodFailed, Reason: "OutOfcpu"}
	s = Generate(Input{Pod: p, Runtime: rt, Previous: failed, Now: now})
	if s.Phase != v1.PodFailed || s.Reason != "OutOfcpu" {
		t.Fatalf("terminal phase must stick, got %s/%s", s.Phase, s.Reason)
	}
}

func TestQOSClass(t *testing.T) {
	q := func(s string) resource.Quantity { return resource.MustParse(s) }
	tests := []struct {
		name string
		res  v1.ResourceRequirements
		want v1.PodQOSClass
	}{
		{"best effort", v1.ResourceRequirements{}, v1.PodQOSBestEffort},
		{"guaranteed", v1.ResourceRequirements{
			Requests: v1.ResourceList{v1.ResourceCPU: q("1"), v1.ResourceMemory: q("1Gi")},
			Limits:   v1.ResourceList{v1.ResourceCPU: q("1"), v1.ResourceMemory: q("1Gi")}}, v1.PodQOSGuaranteed},
		{"burstable", v1.ResourceRequirements{Requests: v1.ResourceList{v1.ResourceMemory: q("1Gi")}}, v1.PodQOSBurstable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := pod(v1.RestartPolicyAlways, "a")
			p.Spec.Containers[0].Resources = tt.res
			if got := QOSClass(p); got != tt.want {
				t.Fatalf("QOSClass = %s, want %s", got, tt.want)
			}
		})
	}
}

// containerView is the part of a container status these tests check.
type containerView struct {
	Name     string
	State    v1.ContainerState
	Last     v1.ContainerState
	Restarts int32
}

func views(list []v1.ContainerStatus) []containerView {
	var out []containerView
	for _, c := range list {
		out = append(out, containerView{Name: c.Name, State: c.State, Last: c.LastTerminationState, Restarts: c.RestartCount})
	}
	return out
}

// A terminal pod reports no waiting container: each ends as upstream ends it, so
// that clients see the pod is over (issue 14, item 7).
func TestTerminalPodEndsWaitingContainers(t *testing.T) {
	exit := runtimeapi.ContainerState_CONTAINER_EXITED
	waiting := func(reason string) v1.ContainerState {
		return v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: reason}}
	}
	unknownAtEnd := v1.ContainerState{Terminated: &v1.ContainerStateTerminated{
		Reason: "ContainerStatusUnknown", Message: "The container could not be located when the pod was terminated", ExitCode: 137}}
	vanished := v1.ContainerState{Terminated: &v1.ContainerStateTerminated{
		Reason: "ContainerStatusUnknown", Message: "The container could not be located when the pod was deleted.  The container used to be Running", ExitCode: 137}}
	completed := func(id string) v1.ContainerState {
		return v1.ContainerState{Terminated: &v1.ContainerStateTerminated{Reason: "Completed", ContainerID: "containerd://" + id,
			StartedAt: metav1.NewTime(now.Add(-time.Minute)), FinishedAt: metav1.NewTime(now)}}
	}
	failedInit := v1.ContainerState{Terminated: &v1.ContainerStateTerminated{Reason: "Error", ExitCode: 1, ContainerID: "containerd://setup-0",
		StartedAt: metav1.NewTime(now.Add(-time.Minute)), FinishedAt: metav1.NewTime(now)}}
	withInits := func(policy v1.RestartPolicy, inits ...string) *v1.Pod {
		p := pod(policy, "app")
		for _, n := range inits {
			p.Spec.InitContainers = append(p.Spec.InitContainers, v1.Container{Name: n, Image: "img"})
		}
		return p
	}
	wasRunning := v1.PodStatus{Phase: v1.PodRunning, ContainerStatuses: []v1.ContainerStatus{{Name: "a", RestartCount: 2,
		State: v1.ContainerState{Running: &v1.ContainerStateRunning{}}}}}

	tests := []struct {
		name      string
		pod       *v1.Pod
		ctrs      []*runtimeapi.ContainerStatus
		waiting   map[string]Waiting
		prev      v1.PodStatus
		terminal  bool
		wantPhase v1.PodPhase
		wantInit  []containerView
		want      []containerView
	}{
		{name: "activeDeadlineSeconds while containers were being created", pod: pod(v1.RestartPolicyAlways, "b", "a"), terminal: true,
			wantPhase: v1.PodFailed, want: []containerView{{Name: "a", State: unknownAtEnd}, {Name: "b", State: unknownAtEnd}}},
		{name: "one container completed, the other could not pull its image", pod: pod(v1.RestartPolicyNever, "a", "b"), terminal: true,
			ctrs: []*runtimeapi.ContainerStatus{cs("a", exit, 0, 1, "0")}, waiting: map[string]Waiting{"b": {Reason: "ImagePullBackOff"}},
			wantPhase: v1.PodFailed, want: []containerView{{Name: "a", State: completed("a-0")}, {Name: "b", State: unknownAtEnd}}},
		{name: "deleted before any init container ran: the first init container ends, app containers keep waiting",
			pod: withInits(v1.RestartPolicyAlways, "setup", "migrate"), terminal: true, wantPhase: v1.PodFailed,
			wantInit: []containerView{{Name: "setup", State: unknownAtEnd}, {Name: "migrate", State: waiting("PodInitializing")}},
			want:     []containerView{{Name: "app", State: waiting("PodInitializing")}}},
		{name: "init container failed under Never: what never started keeps waiting",
			pod: withInits(v1.RestartPolicyNever, "setup", "migrate"), ctrs: []*runtimeapi.ContainerStatus{cs("setup", exit, 1, 1, "0")}, wantPhase: v1.PodFailed,
			wantInit: []containerView{{Name: "setup", State: failedInit}, {Name: "migrate", State: waiting("PodInitializing")}},
			want:     []containerView{{Name: "app", State: waiting("PodInitializing")}}},
		{name: "not terminal: waiting stays waiting", pod: pod(v1.RestartPolicyAlways, "a"), wantPhase: v1.PodPending,
			want: []containerView{{Name: "a", State: waiting("ContainerCreating")}}},
		{name: "a running container vanished from the runtime: it ended, and restarted once more", pod: pod(v1.RestartPolicyAlways, "a"), prev: wasRunning,
			wantPhase: v1.PodRunning, want: []containerView{{Name: "a", State: waiting("ContainerCreating"), Last: vanished, Restarts: 3}}},
		{name: "a running container vanished, then the pod ended", pod: pod(v1.RestartPolicyAlways, "a"), prev: wasRunning, terminal: true,
			wantPhase: v1.PodFailed, want: []containerView{{Name: "a", State: unknownAtEnd, Last: vanished, Restarts: 3}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := Generate(Input{Pod: tt.pod, Runtime: &pleg.PodStatus{UID: "u", Containers: tt.ctrs}, Waiting: tt.waiting,
				Previous: tt.prev, Now: now, Terminal: tt.terminal})
			if s.Phase != tt.wantPhase {
				t.Errorf("phase = %s, want %s", s.Phase, tt.wantPhase)
			}
			if diff := cmp.Diff(tt.wantInit, views(s.InitContainerStatuses)); diff != "" {
				t.Errorf("init container statuses (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.want, views(s.ContainerStatuses)); diff != "" {
				t.Errorf("container statuses (-want +got):\n%s", diff)
			}
		})
	}
}

// Init container statuses come in spec order, app containers by name, as upstream.
func TestContainerStatusOrder(t *testing.T) {
	p := pod(v1.RestartPolicyAlways, "web", "db")
	for _, n := range []string{"setup", "migrate", "await-db"} {
		p.Spec.InitContainers = append(p.Spec.InitContainers, v1.Container{Name: n, Image: "img"})
	}
	s := Generate(Input{Pod: p, Runtime: &pleg.PodStatus{UID: "u"}, Now: now})
	names := func(list []v1.ContainerStatus) (out []string) {
		for _, c := range list {
			out = append(out, c.Name)
		}
		return out
	}
	if diff := cmp.Diff([]string{"setup", "migrate", "await-db"}, names(s.InitContainerStatuses)); diff != "" {
		t.Errorf("init container order (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"db", "web"}, names(s.ContainerStatuses)); diff != "" {
		t.Errorf("container order (-want +got):\n%s", diff)
	}
}

// The phase follows the restarts podruntime makes: a container's own
// restartPolicy and restartPolicyRules (ContainerRestartRules) over the pod's
// restartPolicy, for app and init containers alike.
func TestPhaseWithContainerRestartRules(t *testing.T) {
	exit := runtimeapi.ContainerState_CONTAINER_EXITED
	never, always := v1.ContainerRestartPolicyNever, v1.ContainerRestartPolicyAlways
	restartOn42 := []v1.ContainerRestartRule{{Action: v1.ContainerRestartRuleActionRestart,
		ExitCodes: &v1.ContainerRestartRuleOnExitCodes{Operator: v1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{42}}}}
	withPolicy := func(p *v1.Pod, policy *v1.ContainerRestartPolicy, rules []v1.ContainerRestartRule) *v1.Pod {
		p.Spec.Containers[0].RestartPolicy, p.Spec.Containers[0].RestartPolicyRules = policy, rules
		return p
	}
	backOff := map[string]Waiting{"a": {Reason: "CrashLoopBackOff"}}
	tests := []struct {
		name    string
		pod     *v1.Pod
		ctrs    []*runtimeapi.ContainerStatus
		waiting map[string]Waiting
		want    v1.PodPhase
	}{
		{"Never pod, rule matches exit 42: restarting", withPolicy(pod(v1.RestartPolicyNever, "a"), &never, restartOn42),
			[]*runtimeapi.ContainerStatus{cs("a", exit, 42, 1, "0")}, nil, v1.PodRunning},
		{"Never pod, rule matches, in back-off", withPolicy(pod(v1.RestartPolicyNever, "a"), &never, restartOn42),
			[]*runtimeapi.ContainerStatus{cs("a", exit, 42, 1, "0")}, backOff, v1.PodRunning},
		{"Never pod, rule does not match exit 1: failed", withPolicy(pod(v1.RestartPolicyNever, "a"), &never, restartOn42),
			[]*runtimeapi.ContainerStatus{cs("a", exit, 1, 1, "0")}, nil, v1.PodFailed},
		{"Always pod, container Never exits 1: failed", withPolicy(pod(v1.RestartPolicyAlways, "a"), &never, nil),
			[]*runtimeapi.ContainerStatus{cs("a", exit, 1, 1, "0")}, nil, v1.PodFailed},
		{"Always pod, container Never exits 0: succeeded", withPolicy(pod(v1.RestartPolicyAlways, "a"), &never, nil),
			[]*runtimeapi.ContainerStatus{cs("a", exit, 0, 1, "0")}, nil, v1.PodSucceeded},
		{"Never pod, container Always exits 1: restarting", withPolicy(pod(v1.RestartPolicyNever, "a"), &always, nil),
			[]*runtimeapi.ContainerStatus{cs("a", exit, 1, 1, "0")}, nil, v1.PodRunning},
		{"Never pod, one container Always restarting, the other done", withPolicy(pod(v1.RestartPolicyNever, "a", "b"), &always, nil),
			[]*runtimeapi.ContainerStatus{cs("a", exit, 1, 1, "0"), cs("b", exit, 0, 1, "0")}, nil, v1.PodRunning},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := Generate(Input{Pod: tt.pod, Runtime: &pleg.PodStatus{UID: "u", Sandboxes: sandbox(), Containers: tt.ctrs, IPs: []string{"10.0.0.2"}},
				Waiting: tt.waiting, Now: now})
			if s.Phase != tt.want {
				t.Fatalf("phase = %s, want %s (statuses %+v)", s.Phase, tt.want, s.ContainerStatuses)
			}
		})
	}
}

// A failed init container: those after it wait with reason PodInitializing, app
// containers too; under Never the pod fails, under Always and OnFailure it stays
// Pending while the init container is retried (upstream's InitContainer
// conformance specs).
func TestFailedInitContainer(t *testing.T) {
	exit := runtimeapi.ContainerState_CONTAINER_EXITED
	withInits := func(policy v1.RestartPolicy) *v1.Pod {
		p := pod(policy, "run1")
		p.Spec.InitContainers = []v1.Container{{Name: "init1", Image: "img"}, {Name: "init2", Image: "img"}}
		return p
	}
	ruled := withInits(v1.RestartPolicyNever)
	ruled.Spec.InitContainers[0].RestartPolicy = ptrTo(v1.ContainerRestartPolicyNever)
	ruled.Spec.InitContainers[0].RestartPolicyRules = []v1.ContainerRestartRule{{Action: v1.ContainerRestartRuleActionRestart,
		ExitCodes: &v1.ContainerRestartRuleOnExitCodes{Operator: v1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{1}}}}
	backOff := map[string]Waiting{"init1": {Reason: "CrashLoopBackOff"}}
	tests := []struct {
		name      string
		pod       *v1.Pod
		ctrs      []*runtimeapi.ContainerStatus
		waiting   map[string]Waiting
		wantPhase v1.PodPhase
		wantInit  []string // waiting reason, or "terminated:<code>", "running"
	}{
		{"nothing ran yet", withInits(v1.RestartPolicyAlways), nil, nil, v1.PodPending, []string{"PodInitializing", "PodInitializing"}},
		{"Never: first failed", withInits(v1.RestartPolicyNever), []*runtimeapi.ContainerStatus{cs("init1", exit, 1, 1, "0")}, nil,
			v1.PodFailed, []string{"terminated:1", "PodInitializing"}},
		{"Never: second failed", withInits(v1.RestartPolicyNever), []*runtimeapi.ContainerStatus{cs("init1", exit, 0, 1, "0"), cs("init2", exit, 1, 2, "0")}, nil,
			v1.PodFailed, []string{"terminated:0", "terminated:1"}},
		{"Always: first failed, not yet restarted", withInits(v1.RestartPolicyAlways), []*runtimeapi.ContainerStatus{cs("init1", exit, 1, 1, "0")}, nil,
			v1.PodPending, []string{"terminated:1", "PodInitializing"}},
		{"Always: first failed, in back-off", withInits(v1.RestartPolicyAlways), []*runtimeapi.ContainerStatus{cs("init1", exit, 1, 1, "2")}, backOff,
			v1.PodPending, []string{"CrashLoopBackOff", "PodInitializing"}},
		{"OnFailure: first failed, in back-off", withInits(v1.RestartPolicyOnFailure), []*runtimeapi.ContainerStatus{cs("init1", exit, 1, 1, "2")}, backOff,
			v1.PodPending, []string{"CrashLoopBackOff", "PodInitializing"}},
		{"Never pod, init rule restarts exit 1", ruled, []*runtimeapi.ContainerStatus{cs("init1", exit, 1, 1, "0")}, nil,
			v1.PodPending, []string{"terminated:1", "PodInitializing"}},
		{"created, not started: waiting for its start", withInits(v1.RestartPolicyAlways),
			[]*runtimeapi.ContainerStatus{cs("init1", runtimeapi.ContainerState_CONTAINER_CREATED, 0, 1, "0")}, nil,
			v1.PodPending, []string{"PodInitializing", "PodInitializing"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := Generate(Input{Pod: tt.pod, Runtime: &pleg.PodStatus{UID: "u", Sandboxes: sandbox(), Containers: tt.ctrs, IPs: []string{"10.0.0.2"}},
				Waiting: tt.waiting, Now: now})
			if s.Phase != tt.wantPhase {
				t.Errorf("phase = %s, want %s", s.Phase, tt.wantPhase)
			}
			var got []string
			for _, c := range s.InitContainerStatuses {
				switch {
				case c.State.Waiting != nil:
					got = append(got, c.State.Waiting.Reason)
				case c.State.Terminated != nil:
					got = append(got, "terminated:"+strconv.Itoa(int(c.State.Terminated.ExitCode)))
				default:
					got = append(got, "running")
				}
			}
			if diff := cmp.Diff(tt.wantInit, got); diff != "" {
				t.Errorf("init containers (-want +got):\n%s", diff)
			}
			for _, c := range s.ContainerStatuses {
				if c.State.Waiting == nil || c.State.Waiting.Reason != "PodInitializing" {
					t.Errorf("app container %s = %+v, want waiting PodInitializing", c.Name, c.State)
				}
			}
			init := cond(v1.PodInitialized, false, "")
			for _, c := range s.Conditions {
				if c.Type == v1.PodInitialized {
					init = c
				}
			}
			if init.Status != v1.ConditionFalse || init.Reason != "ContainersNotInitialized" {
				t.Errorf("Initialized = %+v, want False/ContainersNotInitialized", init)
			}
		})
	}
}

func ptrTo[T any](v T) *T { return &v }

// TestContainerUser: status.containerStatuses[].user is what the runtime's
// ContainerStatus reports for the newest instance, running or exited, as
// upstream copies it; nothing when the runtime reports nothing.
func TestContainerUser(t *testing.T) {
	p := pod(v1.RestartPolicyAlways, "a", "b", "c")
	a := cs("a", runtimeapi.ContainerState_CONTAINER_RUNNING, 0, 2, "0")
	a.User = &runtimeapi.ContainerUser{Linux: &runtimeapi.LinuxContainerUser{Uid: 1000, Gid: 3000, SupplementalGroups: []int64{3000, 4000}}}
	b := cs("b", runtimeapi.ContainerState_CONTAINER_EXITED, 1, 2, "0")
	b.User = &runtimeapi.ContainerUser{Linux: &runtimeapi.LinuxContainerUser{Uid: 0, Gid: 0, SupplementalGroups: []int64{0, 10}}}
	c := cs("c", runtimeapi.ContainerState_CONTAINER_RUNNING, 0, 2, "0")
	s := Generate(Input{Pod: p, Runtime: &pleg.PodStatus{UID: "u", Sandboxes: sandbox(), Containers: []*runtimeapi.ContainerStatus{a, b, c}}, Now: now})
	want := map[string]*v1.ContainerUser{
		"a": {Linux: &v1.LinuxContainerUser{UID: 1000, GID: 3000, SupplementalGroups: []int64{3000, 4000}}},
		"b": {Linux: &v1.LinuxContainerUser{UID: 0, GID: 0, SupplementalGroups: []int64{0, 10}}},
		"c": nil,
	}
	for _, st := range s.ContainerStatuses {
		if d := cmp.Diff(want[st.Name], st.User); d != "" {
			t.Errorf("%s user (-want +got):\n%s", st.Name, d)
		}
	}
}

// A container whose start a crash cut off never ran and is about to be replaced
// with the same attempt: it shows waiting, not terminated, with no last state,
// and the pod does not fail even under restartPolicy Never.
func TestCutStartShownWaiting(t *testing.T) {
	p := pod(v1.RestartPolicyNever, "a")
	cut := cs("a", runtimeapi.ContainerState_CONTAINER_EXITED, 128, 1, "0")
	cut.StartedAt, cut.Reason, cut.Message = 0, "StartError", "failed to create containerd task: context canceled"
	rt := &pleg.PodStatus{UID: "u", Sandboxes: sandbox(), IPs: []string{"10.244.0.7"}, Containers: []*runtimeapi.ContainerStatus{cut}}
	s := Generate(Input{Pod: p, Runtime: rt, Now: now})
	c := s.ContainerStatuses[0]
	if c.State.Waiting == nil || c.State.Terminated != nil || c.RestartCount != 0 || c.LastTerminationState.Terminated != nil {
		t.Fatalf("container status = %+v, want waiting, restart count 0, no last state", c)
	}
	if s.Phase != v1.PodPending {
		t.Fatalf("phase = %s, want Pending: the container never ran", s.Phase)
	}

	// Its replacement runs: the cut attempt is no last termination either.
	rt.Containers = []*runtimeapi.ContainerStatus{cs("a", runtimeapi.ContainerState_CONTAINER_RUNNING, 0, 2, "0"), cut}
	c = Generate(Input{Pod: p, Runtime: rt, Now: now}).ContainerStatuses[0]
	if c.State.Running == nil || c.RestartCount != 0 || c.LastTerminationState.Terminated != nil {
		t.Fatalf("container status = %+v, want running, restart count 0, no last state", c)
	}
}
