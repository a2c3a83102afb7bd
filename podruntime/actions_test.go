package podruntime

import (
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/flowcontrol"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/cri"
	"github.com/nodelet/nodelet/pleg"
)

var t0 = time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)

func testPod(policy v1.RestartPolicy, containers ...string) *v1.Pod {
	p := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "uid-1"},
		Spec:       v1.PodSpec{RestartPolicy: policy},
	}
	for _, c := range containers {
		p.Spec.Containers = append(p.Spec.Containers, v1.Container{Name: c, Image: "busybox"})
	}
	return p
}

func readySandbox(attempt uint32) *runtimeapi.PodSandboxStatus {
	return &runtimeapi.PodSandboxStatus{
		Id: "sb", State: runtimeapi.PodSandboxState_SANDBOX_READY,
		Metadata: &runtimeapi.PodSandboxMetadata{Attempt: attempt},
		Network:  &runtimeapi.PodSandboxNetworkStatus{Ip: "10.244.0.5"},
	}
}

func ctr(pod *v1.Pod, name string, state runtimeapi.ContainerState, exit int32, created int64) *runtimeapi.ContainerStatus {
	spec := specByName(pod, name)
	return &runtimeapi.ContainerStatus{
		Id: name + "-id", State: state, ExitCode: exit, CreatedAt: created,
		FinishedAt: t0.Add(-time.Second).UnixNano(),
		Labels:     map[string]string{cri.LabelContainerName: name},
		Annotations: map[string]string{
			cri.AnnotationContainerHash: ContainerHash(spec),
		},
	}
}

// fixture is a pod and what the runtime reports of it, built like the fixtures of
// upstream's TestComputePodActions* so that their cases read the same here.
type fixture struct {
	pod *v1.Pod
	st  *pleg.PodStatus
}

// base is upstream's makeBasePodAndStatus: three app containers running in a
// ready sandbox (upstream leaves the restart policy empty, which means Always).
func base() fixture {
	pod := testPod(v1.RestartPolicyAlways, "foo1", "foo2", "foo3")
	f := fixture{pod: pod, st: &pleg.PodStatus{Sandboxes: []*runtimeapi.PodSandboxStatus{readySandbox(0)}}}
	return f.add("foo1", running).add("foo2", running).add("foo3", running)
}

// withInits is upstream's makeBasePodAndStatusWithInitContainers: base's pod with
// three init containers that all succeeded, and no app container yet.
func withInits() fixture {
	f := base()
	f.pod.Spec.InitContainers = []v1.Container{{Name: "init1", Image: "bar-image"}, {Name: "init2", Image: "bar-image"}, {Name: "init3", Image: "bar-image"}}
	f.st.Containers = nil
	return f.add("init1", exited(0)).add("init2", exited(0)).add("init3", exited(0))
}

// withSidecars is upstream's makeBasePodAndStatusWithRestartableInitContainers:
// three running sidecars, the last two with liveness and startup probes, and no
// app container yet.
func withSidecars() fixture {
	f := base()
	always := ptr.To(v1.ContainerRestartPolicyAlways)
	f.pod.Spec.InitContainers = []v1.Container{
		{Name: "restartable-init-1", Image: "bar-image", RestartPolicy: always},
		{Name: "restartable-init-2", Image: "bar-image", RestartPolicy: always, LivenessProbe: &v1.Probe{}, StartupProbe: &v1.Probe{}},
		{Name: "restartable-init-3", Image: "bar-image", RestartPolicy: always, LivenessProbe: &v1.Probe{}, StartupProbe: &v1.Probe{}},
	}
	f.st.Containers = nil
	return f.add("restartable-init-1", running).add("restartable-init-2", running).add("restartable-init-3", running)
}

type ctrState struct {
	state           runtimeapi.ContainerState
	exit            int32
	reason, message string
}

var (
	running = ctrState{state: runtimeapi.ContainerState_CONTAINER_RUNNING}
	created = ctrState{state: runtimeapi.ContainerState_CONTAINER_CREATED}
	unknown = ctrState{state: runtimeapi.ContainerState_CONTAINER_UNKNOWN}
)

func exited(code int32) ctrState {
	return ctrState{state: runtimeapi.ContainerState_CONTAINER_EXITED, exit: code}
}

// What containerd reports of a container that never ran: its start cancelled by
// the caller going away, lost by a restarted runtime, or refused for the
// container's own reason.
var (
	startCancelled = ctrState{state: runtimeapi.ContainerState_CONTAINER_EXITED, exit: 128, reason: "StartError",
		message: "failed to create containerd task: failed to create shim task: context canceled"}
	startLost = ctrState{state: runtimeapi.ContainerState_CONTAINER_EXITED, exit: 255, reason: "Unknown"}
	// containerd killed inside CreateContainer lost the status the creation writes.
	creationLost = ctrState{state: runtimeapi.ContainerState_CONTAINER_UNKNOWN, exit: 255, reason: "Unknown"}
	startFailed  = ctrState{state: runtimeapi.ContainerState_CONTAINER_EXITED, exit: 128, reason: "StartError",
		message: `failed to create containerd task: failed to create shim task: OCI runtime create failed: exec: "nope": executable file not found in $PATH`}
)

// add reports container name in state s, newer than what was added before.
func (f fixture) add(name string, s ctrState) fixture {
	c := ctr(f.pod, name, s.state, s.exit, int64(len(f.st.Containers)+1))
	c.Reason, c.Message = s.reason, s.message
	f.st.Containers = append(f.st.Containers, c)
	return f
}

// set changes the state of name's container.
func (f fixture) set(name string, s ctrState) fixture {
	for _, c := range f.st.Containers {
		if containerName(c) == name {
			c.State, c.ExitCode, c.Reason, c.Message = s.state, s.exit, s.reason, s.message
		}
	}
	return f
}

// only keeps the containers named.
func (f fixture) only(names ...string) fixture {
	var keep []*runtimeapi.ContainerStatus
	for _, c := range f.st.Containers {
		if slices.Contains(names, containerName(c)) {
			keep = append(keep, c)
		}
	}
	f.st.Containers = keep
	return f
}

func (f fixture) policy(p v1.RestartPolicy) fixture { f.pod.Spec.RestartPolicy = p; return f }

// restartPolicy gives container name its own restartPolicy and rules
// (ContainerRestartRules); its runtime containers keep matching its spec.
func (f fixture) restartPolicy(name string, p v1.ContainerRestartPolicy, rules ...v1.ContainerRestartRule) fixture {
	c := specByName(f.pod, name)
	c.RestartPolicy, c.RestartPolicyRules = &p, rules
	for _, s := range f.st.Containers {
		if containerName(s) == name {
			s.Annotations[cri.AnnotationContainerHash] = ContainerHash(c)
		}
	}
	return f
}

// restartOn is a rule restarting the container on the exit codes op values.
func restartOn(op v1.ContainerRestartRuleOnExitCodesOperator, values ...int32) v1.ContainerRestartRule {
	return v1.ContainerRestartRule{Action: v1.ContainerRestartRuleActionRestart,
		ExitCodes: &v1.ContainerRestartRuleOnExitCodes{Operator: op, Values: values}}
}

// deadSandbox makes the sandbox not ready; it was created with attempt.
func (f fixture) deadSandbox(attempt uint32) fixture {
	f.st.Sandboxes[0].State = runtimeapi.PodSandboxState_SANDBOX_NOTREADY
	f.st.Sandboxes[0].Metadata.Attempt = attempt
	return f
}

func (f fixture) noSandbox() fixture { f.st.Sandboxes = nil; return f }

// ephemeral adds ephemeral containers to the pod's spec (the runtime knows none yet).
func (f fixture) ephemeral(names ...string) fixture {
	for _, n := range names {
		f.pod.Spec.EphemeralContainers = append(f.pod.Spec.EphemeralContainers,
			v1.EphemeralContainer{EphemeralContainerCommon: v1.EphemeralContainerCommon{Name: n, Image: "busybox"}})
	}
	return f
}

// apiStatus records in the pod's API status that ephemeral container name ran
// (as container id) and ended.
func (f fixture) apiStatus(name, id string) fixture {
	f.pod.Status.EphemeralContainerStatuses = append(f.pod.Status.EphemeralContainerStatuses, v1.ContainerStatus{
		Name: name, ContainerID: "containerd://" + id,
		State: v1.ContainerState{Terminated: &v1.ContainerStateTerminated{ExitCode: 0}},
	})
	return f
}

func (f fixture) image(container, image string) fixture {
	specByName(f.pod, container).Image = image
	return f
}

// The cases of upstream's TestComputePodActions, TestComputePodActionsWithInitContainers
// and TestComputePodActionsWithRestartableInitContainers (their names, facts only),
// then nodelet's own. Where nodelet differs on purpose the name says so after
// "nodelet:". Throughout, SandboxID names only a sandbox that is reused (upstream
// also names the dead one being replaced), and a probe failure kills the
// container while its restart waits for the next sync, where the restart policy
// and back-off apply (upstream restarts it in the same sync).
func TestComputeActions(t *testing.T) {
	const unknownKill = `is in "unknown" state, try killing it before restart`
	sb := func(a Actions) Actions { a.SandboxID = "sb"; return a }
	tests := []struct {
		name   string
		f      fixture
		probes map[string]ProbeVerdict // container ID -> what the prober says
		want   Actions
	}{
		// TestComputePodActions.
		{name: "everything is good; do nothing", f: base(), want: sb(Actions{})},
		{name: "start pod sandbox and all containers for a new pod (nodelet: KillPod only when there is something to kill)",
			f: base().noSandbox().only(), want: Actions{CreateSandbox: true, StartContainers: []int{0, 1, 2}}},
		{name: "restart exited containers if RestartPolicy == Always",
			f: base().set("foo1", exited(0)).set("foo2", exited(111)), want: sb(Actions{StartContainers: []int{0, 1}})},
		{name: "restart failed containers if RestartPolicy == OnFailure",
			f: base().policy(v1.RestartPolicyOnFailure).set("foo1", exited(0)).set("foo2", exited(111)), want: sb(Actions{StartContainers: []int{1}})},
		{name: "restart created but not started containers if RestartPolicy == OnFailure",
			f: base().policy(v1.RestartPolicyOnFailure).set("foo1", exited(0)).set("foo2", created), want: sb(Actions{StartContainers: []int{1}})},
		{name: "don't restart containers if RestartPolicy == Never",
			f: base().policy(v1.RestartPolicyNever).set("foo1", exited(0)).set("foo2", exited(111)), want: sb(Actions{})},
		{name: "Kill pod and recreate everything if the pod sandbox is dead, and RestartPolicy == Always",
			f: base().deadSandbox(0), want: Actions{KillPod: true, CreateSandbox: true, Attempt: 1, StartContainers: []int{0, 1, 2}}},
		{name: "Kill pod and recreate all containers (except for the succeeded one) if the pod sandbox is dead, and RestartPolicy == OnFailure",
			f:    base().policy(v1.RestartPolicyOnFailure).deadSandbox(0).set("foo2", exited(0)),
			want: Actions{KillPod: true, CreateSandbox: true, Attempt: 1, StartContainers: []int{0, 2}}},
		{name: "Kill pod and recreate all containers if the PodSandbox does not have an IP",
			f:    func() fixture { f := base(); f.st.Sandboxes[0].Network.Ip = ""; return f }(),
			want: Actions{KillPod: true, CreateSandbox: true, Attempt: 1, StartContainers: []int{0, 1, 2}}},
		{name: "Kill and recreate the container if the container's spec changed",
			f:    base().image("foo2", "busybox:2"),
			want: sb(Actions{StartContainers: []int{1}, KillContainers: map[string]string{"foo2-id": "Container foo2 definition changed, will be restarted"}})},
		{name: "Kill and recreate the container if the liveness check has failed (nodelet: restarted on the next sync)",
			f: base(), probes: map[string]ProbeVerdict{"foo2-id": {Failed: "liveness"}},
			want: sb(Actions{KillContainers: map[string]string{"foo2-id": "Container foo2 failed liveness probe, will be restarted"}})},
		{name: "Kill and recreate the container if the startup check has failed (nodelet: restarted on the next sync)",
			f: base(), probes: map[string]ProbeVerdict{"foo2-id": {Failed: "startup"}},
			want: sb(Actions{KillContainers: map[string]string{"foo2-id": "Container foo2 failed startup probe, will be restarted"}})},
		{name: "Verify we do not create a pod sandbox if no ready sandbox for pod with RestartPolicy=Never and all containers exited",
			f:    base().policy(v1.RestartPolicyNever).deadSandbox(1).set("foo1", exited(0)).set("foo2", exited(0)).set("foo3", exited(0)),
			want: Actions{KillPod: true, Attempt: 2}},
		{name: "Verify we do not create a pod sandbox if no ready sandbox for pod with RestartPolicy=OnFailure and all containers succeeded",
			f:    base().policy(v1.RestartPolicyOnFailure).deadSandbox(1).set("foo1", exited(0)).set("foo2", exited(0)).set("foo3", exited(0)),
			want: Actions{KillPod: true, Attempt: 2}},
		{name: "Verify we create a pod sandbox if no ready sandbox for pod with RestartPolicy=Never and no containers have ever been created",
			f:    base().policy(v1.RestartPolicyNever).deadSandbox(2).only(),
			want: Actions{KillPod: true, CreateSandbox: true, Attempt: 3, StartContainers: []int{0, 1, 2}}},
		{name: "Kill and recreate the container if the container is in unknown state",
			f:    base().policy(v1.RestartPolicyNever).set("foo2", unknown),
			want: sb(Actions{StartContainers: []int{1}, KillContainers: map[string]string{"foo2-id": "Container " + unknownKill}})},
		{name: "Restart the container if the container is in created state",
			f: base().policy(v1.RestartPolicyNever).set("foo2", created), want: sb(Actions{StartContainers: []int{1}})},

		// TestComputePodActionsWithInitContainers.
		{name: "init: initialization completed; start all containers", f: withInits(), want: sb(Actions{StartContainers: []int{0, 1, 2}})},
		{name: "init: no init containers have been started; start the first one", f: withInits().only(), want: sb(Actions{StartInit: []int{0}})},
		{name: "init: initialization in progress; do nothing", f: withInits().set("init3", running), want: sb(Actions{})},
		{name: "init: Kill pod and restart the first init container if the pod sandbox is dead",
			f: withInits().deadSandbox(0), want: Actions{KillPod: true, CreateSandbox: true, Attempt: 1, StartInit: []int{0}}},
		{name: "init: initialization failed; restart the last init container if RestartPolicy == Always",
			f: withInits().set("init3", exited(137)), want: sb(Actions{StartInit: []int{2}})},
		{name: "init: initialization failed; restart the last init container if RestartPolicy == OnFailure",
			f: withInits().policy(v1.RestartPolicyOnFailure).set("init3", exited(137)), want: sb(Actions{StartInit: []int{2}})},
		{name: "init: initialization failed; kill pod if RestartPolicy == Never (nodelet: InitFailed tells the sync loop)",
			f: withInits().policy(v1.RestartPolicyNever).set("init3", exited(137)), want: sb(Actions{KillPod: true, InitFailed: true})},
		{name: "init: init container state unknown; kill and recreate the last init container if RestartPolicy == Always",
			f:    withInits().set("init3", unknown),
			want: sb(Actions{StartInit: []int{2}, KillContainers: map[string]string{"init3-id": "Init container " + unknownKill}})},
		{name: "init: init container state unknown; kill and recreate the last init container if RestartPolicy == OnFailure",
			f:    withInits().policy(v1.RestartPolicyOnFailure).set("init3", unknown),
			want: sb(Actions{StartInit: []int{2}, KillContainers: map[string]string{"init3-id": "Init container " + unknownKill}})},
		{name: "init: init container state unknown; kill pod if RestartPolicy == Never (nodelet: InitFailed)",
			f: withInits().policy(v1.RestartPolicyNever).set("init3", unknown), want: sb(Actions{KillPod: true, InitFailed: true})},
		{name: "init: Pod sandbox not ready, init container failed, but RestartPolicy == Never; kill pod only",
			f: withInits().policy(v1.RestartPolicyNever).deadSandbox(0), want: Actions{KillPod: true, Attempt: 1}},
		{name: "init: Pod sandbox not ready, and RestartPolicy == Never, but no visible init containers; create a new pod sandbox",
			f: withInits().policy(v1.RestartPolicyNever).deadSandbox(0).only(), want: Actions{KillPod: true, CreateSandbox: true, Attempt: 1, StartInit: []int{0}}},
		{name: "init: Pod sandbox not ready, init container failed, and RestartPolicy == OnFailure; create a new pod sandbox",
			f:    withInits().policy(v1.RestartPolicyOnFailure).deadSandbox(0).set("init3", exited(137)),
			want: Actions{KillPod: true, CreateSandbox: true, Attempt: 1, StartInit: []int{0}}},
		{name: "init: some of the init container statuses are missing but the last init container is running, don't restart preceding ones",
			f: withInits().set("init3", running).only("init3"), want: sb(Actions{})},
		{name: "init: an init container is in the created state due to an unknown error when starting container; restart it",
			f: withInits().set("init3", created), want: sb(Actions{StartInit: []int{2}})},

		// TestComputePodActionsWithRestartableInitContainers.
		{name: "sidecar: initialization completed; start all containers", f: withSidecars(), want: sb(Actions{StartContainers: []int{0, 1, 2}})},
		{name: "sidecar: no init containers have been started; start the first one", f: withSidecars().only(), want: sb(Actions{StartInit: []int{0}})},
		{name: "sidecar: an init container is stuck in the created state; restart it",
			f: withSidecars().set("restartable-init-3", created), want: sb(Actions{StartInit: []int{2}})},
		{name: "sidecar: restartable init container has started; start the next",
			f: withSidecars().only("restartable-init-1"), want: sb(Actions{StartInit: []int{1}})},
		{name: "sidecar: livenessProbe has not been run; start the nothing (sic; the next one starts)",
			f: withSidecars().only("restartable-init-1", "restartable-init-2"), want: sb(Actions{StartInit: []int{2}})},
		{name: "sidecar: livenessProbe in progress; start the next",
			f: withSidecars().only("restartable-init-1", "restartable-init-2"), want: sb(Actions{StartInit: []int{2}})},
		{name: "sidecar: livenessProbe has completed; start the next",
			f: withSidecars().only("restartable-init-1", "restartable-init-2"), want: sb(Actions{StartInit: []int{2}})},
		{name: "sidecar: kill and recreate the restartable init container if the liveness check has failed (nodelet: restarted on the next sync)",
			f: withSidecars(), probes: map[string]ProbeVerdict{"restartable-init-3-id": {Failed: "liveness"}},
			want: sb(Actions{StartContainers: []int{0, 1, 2},
				KillContainers: map[string]string{"restartable-init-3-id": "Container restartable-init-3 failed liveness probe, will be restarted"}})},
		{name: "sidecar: startupProbe has not been run; do nothing",
			f: withSidecars().only("restartable-init-1", "restartable-init-2"), probes: map[string]ProbeVerdict{"restartable-init-2-id": {NotStarted: true}},
			want: sb(Actions{})},
		{name: "sidecar: startupProbe in progress; do nothing",
			f: withSidecars().only("restartable-init-1", "restartable-init-2"), probes: map[string]ProbeVerdict{"restartable-init-2-id": {NotStarted: true}},
			want: sb(Actions{})},
		{name: "sidecar: startupProbe has completed; start the next",
			f: withSidecars().only("restartable-init-1", "restartable-init-2"), want: sb(Actions{StartInit: []int{2}})},
		{name: "sidecar: kill and recreate the restartable init container if the startup check has failed (nodelet: restarted on the next sync)",
			f: withSidecars(), probes: map[string]ProbeVerdict{"restartable-init-3-id": {Failed: "startup", NotStarted: true}},
			want: sb(Actions{KillContainers: map[string]string{"restartable-init-3-id": "Container restartable-init-3 failed startup probe, will be restarted"}})},
		{name: "sidecar: kill and recreate the restartable init container if the container definition changes",
			f: withSidecars().image("restartable-init-3", "foo-image"),
			want: sb(Actions{StartInit: []int{2}, StartContainers: []int{0, 1, 2},
				KillContainers: map[string]string{"restartable-init-3-id": "Init container restartable-init-3 definition changed"}})},
		{name: "sidecar: restart terminated restartable init container and next init container",
			f: withSidecars().set("restartable-init-1", exited(0)).set("restartable-init-3", exited(0)), want: sb(Actions{StartInit: []int{0, 2}})},
		{name: "sidecar: restart terminated restartable init container and regular containers",
			f: withSidecars().set("restartable-init-1", exited(0)), want: sb(Actions{StartInit: []int{0}, StartContainers: []int{0, 1, 2}})},
		{name: "sidecar: Pod sandbox not ready, restartable init container failed, but RestartPolicy == Never; kill pod only",
			f:    withSidecars().policy(v1.RestartPolicyNever).deadSandbox(0).set("restartable-init-3", exited(137)),
			want: Actions{KillPod: true, Attempt: 1}},
		{name: "sidecar: Pod sandbox not ready, and RestartPolicy == Never, but no visible restartable init containers;  create a new pod sandbox",
			f:    withSidecars().policy(v1.RestartPolicyNever).deadSandbox(0).only(),
			want: Actions{KillPod: true, CreateSandbox: true, Attempt: 1, StartInit: []int{0}}},
		{name: "sidecar: Pod sandbox not ready, restartable init container failed, and RestartPolicy == OnFailure; create a new pod sandbox",
			f:    withSidecars().policy(v1.RestartPolicyOnFailure).deadSandbox(0).set("restartable-init-3", exited(137)),
			want: Actions{KillPod: true, CreateSandbox: true, Attempt: 1, StartInit: []int{0}}},
		{name: "sidecar: Pod sandbox not ready, restartable init container failed, and RestartPolicy == Always; create a new pod sandbox",
			f:    withSidecars().deadSandbox(0).set("restartable-init-3", exited(137)),
			want: Actions{KillPod: true, CreateSandbox: true, Attempt: 1, StartInit: []int{0}}},
		{name: "sidecar: initialization failed; restart the last restartable init container even if pod's RestartPolicy == Never",
			f: withSidecars().policy(v1.RestartPolicyNever).set("restartable-init-3", exited(137)), want: sb(Actions{StartInit: []int{2}})},
		{name: "sidecar: restartable init container state unknown; kill and recreate the last restartable init container even if pod's RestartPolicy == Never",
			f:    withSidecars().policy(v1.RestartPolicyNever).set("restartable-init-3", unknown),
			want: sb(Actions{StartInit: []int{2}, KillContainers: map[string]string{"restartable-init-3-id": "Init container " + unknownKill}})},
		{name: "sidecar: restart restartable init container if regular containers are running even if pod's RestartPolicy == Never",
			f:    withSidecars().policy(v1.RestartPolicyNever).set("restartable-init-3", exited(137)).add("foo1", running).add("foo2", running).add("foo3", running),
			want: sb(Actions{StartInit: []int{2}})},
		{name: "sidecar: kill the pod if all main containers succeeded if pod's RestartPolicy == Never",
			f:    withSidecars().policy(v1.RestartPolicyNever).add("foo1", exited(0)).add("foo2", exited(0)).add("foo3", exited(0)),
			want: sb(Actions{KillPod: true})},
		{name: "sidecar: some of the init container statuses are missing but the last init container is running, restart restartable init and regular containers",
			f: withSidecars().only("restartable-init-3"), want: sb(Actions{StartInit: []int{0, 1}, StartContainers: []int{0, 1, 2}})},

		// TestComputePodActionsWithInitAndEphemeralContainers.
		{name: "ephemeral: steady state; do nothing; ignore ephemeral container",
			f: withInits().add("foo1", running).add("foo2", running).add("foo3", running).ephemeral("debug").add("debug", running), want: sb(Actions{})},
		{name: "ephemeral: No ephemeral containers running; start one",
			f: withInits().add("foo1", running).add("foo2", running).add("foo3", running).ephemeral("debug"), want: sb(Actions{StartEphemeral: []int{0}})},
		{name: "ephemeral: Start second ephemeral container",
			f:    withInits().add("foo1", running).add("foo2", running).add("foo3", running).ephemeral("debug", "debug2").add("debug", running),
			want: sb(Actions{StartEphemeral: []int{1}})},
		{name: "ephemeral: Ephemeral container exited; do not restart",
			f: withInits().add("foo1", running).add("foo2", running).add("foo3", running).ephemeral("debug").add("debug", exited(0)), want: sb(Actions{})},
		{name: "ephemeral: Initialization of ephemeral container in progress; do nothing",
			f: withInits().add("foo1", running).add("foo2", running).add("foo3", running).ephemeral("debug").add("debug", created), want: sb(Actions{})},
		{name: "ephemeral: Kill pod and do not restart ephemeral container if the pod sandbox is dead",
			f:    withInits().add("foo1", running).add("foo2", running).add("foo3", running).ephemeral("debug").add("debug", running).deadSandbox(0),
			want: Actions{KillPod: true, CreateSandbox: true, Attempt: 1, StartInit: []int{0}}},
		{name: "ephemeral: Kill pod if all containers exited except ephemeral container",
			f:    withInits().policy(v1.RestartPolicyNever).add("foo1", exited(0)).add("foo2", exited(0)).add("foo3", exited(0)).ephemeral("debug").add("debug", running),
			want: sb(Actions{KillPod: true})},
		{name: "ephemeral: Ephemeral container is in unknown state; leave it alone",
			f: withInits().add("foo1", running).add("foo2", running).add("foo3", running).ephemeral("debug").add("debug", unknown), want: sb(Actions{})},

		// nodelet's own, ephemeral containers.
		{name: "ephemeral: starts while an init container still runs (it may be there to debug it)",
			f: withInits().set("init3", running).ephemeral("debug"), want: sb(Actions{StartEphemeral: []int{0}})},
		{name: "ephemeral: starts beside app containers being started, in spec order",
			f: base().set("foo1", exited(1)).ephemeral("a", "b"), want: sb(Actions{StartContainers: []int{0}, StartEphemeral: []int{0, 1}})},
		{name: "ephemeral: one that exited with an error is not restarted, whatever the pod's restart policy",
			f: base().ephemeral("debug").add("debug", exited(137)), want: sb(Actions{})},
		{name: "ephemeral: its instance garbage collected, but the API status says it ran: not restarted",
			f: base().ephemeral("debug", "debug2").apiStatus("debug", "gone"), want: sb(Actions{StartEphemeral: []int{1}})},
		{name: "ephemeral: none started in a pod whose init container failed for good",
			f:    withInits().policy(v1.RestartPolicyNever).set("init3", exited(1)).ephemeral("debug"),
			want: sb(Actions{KillPod: true, InitFailed: true})},
		{name: "ephemeral: not started when there is no sandbox yet",
			f: base().noSandbox().only().ephemeral("debug"), want: Actions{CreateSandbox: true, StartContainers: []int{0, 1, 2}}},

		// nodelet's own.
		{name: "succeeded container under OnFailure is done: pod killed",
			f:    base().policy(v1.RestartPolicyOnFailure).set("foo1", exited(0)).set("foo2", exited(0)).set("foo3", exited(0)),
			want: sb(Actions{KillPod: true})},
		{name: "init containers run one after the other",
			f: withInits().only("init1"), want: sb(Actions{StartInit: []int{1}})},
		{name: "an init container left created after a restart gets a new instance, the ones before are not rerun",
			f: withInits().only("init1", "init2").set("init2", created), want: sb(Actions{StartInit: []int{1}})},
		{name: "a container whose start was cancelled (nodelet killed mid-call) is started again even under Never",
			f: base().policy(v1.RestartPolicyNever).set("foo2", startCancelled), want: sb(Actions{StartContainers: []int{1}})},
		{name: "a container whose start the restarted runtime lost is started again even under Never",
			f: base().policy(v1.RestartPolicyNever).set("foo2", startLost), want: sb(Actions{StartContainers: []int{1}})},
		{name: "a container that failed to start for its own reason stays down under Never",
			f: base().policy(v1.RestartPolicyNever).set("foo2", startFailed), want: sb(Actions{})},
		{name: "an init container whose start was cancelled is started again under Never, not failing the pod",
			f: withInits().policy(v1.RestartPolicyNever).set("init3", startCancelled), want: sb(Actions{StartInit: []int{2}})},
		{name: "an init container that failed to start for its own reason fails a Never pod",
			f: withInits().policy(v1.RestartPolicyNever).set("init3", startFailed), want: sb(Actions{KillPod: true, InitFailed: true})},
		{name: "a sidecar whose start was cancelled is started again",
			f: withSidecars().set("restartable-init-3", startCancelled), want: sb(Actions{StartInit: []int{2}})},
		{name: "no sandbox left, every container succeeded under OnFailure: no new sandbox",
			f:    base().policy(v1.RestartPolicyOnFailure).noSandbox().set("foo1", exited(0)).set("foo2", exited(0)).set("foo3", exited(0)),
			want: Actions{KillPod: true}},
		{name: "sandbox dead after every app container succeeded under OnFailure: no sandbox, init containers not rerun",
			f:    withSidecars().policy(v1.RestartPolicyOnFailure).deadSandbox(0).set("restartable-init-1", exited(0)).add("foo1", exited(0)).add("foo2", exited(0)).add("foo3", exited(0)),
			want: Actions{KillPod: true, Attempt: 1}},

		// ContainerRestartRules (KEP-5307): a container's restartPolicy and rules over the pod's policy.
		{name: "rules: Never pod, rule In [42] matches exit 42: restart",
			f:    base().policy(v1.RestartPolicyNever).set("foo1", exited(42)).restartPolicy("foo1", v1.ContainerRestartPolicyNever, restartOn(v1.ContainerRestartRuleOnExitCodesOpIn, 42)),
			want: sb(Actions{StartContainers: []int{0}})},
		{name: "rules: Never pod, rule In [42] does not match exit 1, container Never: stays down",
			f:    base().policy(v1.RestartPolicyNever).set("foo1", exited(1)).restartPolicy("foo1", v1.ContainerRestartPolicyNever, restartOn(v1.ContainerRestartRuleOnExitCodesOpIn, 42)),
			want: sb(Actions{})},
		{name: "rules: NotIn [0] matches exit 3 in a Never pod: restart",
			f:    base().policy(v1.RestartPolicyNever).set("foo2", exited(3)).restartPolicy("foo2", v1.ContainerRestartPolicyNever, restartOn(v1.ContainerRestartRuleOnExitCodesOpNotIn, 0)),
			want: sb(Actions{StartContainers: []int{1}})},
		{name: "rules: container Always in a Never pod: restart",
			f:    base().policy(v1.RestartPolicyNever).set("foo1", exited(1)).restartPolicy("foo1", v1.ContainerRestartPolicyAlways),
			want: sb(Actions{StartContainers: []int{0}})},
		{name: "rules: container Never in an Always pod: stays down, the others run on",
			f:    base().set("foo1", exited(1)).restartPolicy("foo1", v1.ContainerRestartPolicyNever),
			want: sb(Actions{})},
		{name: "rules: container OnFailure in an Always pod exited 0: stays down",
			f:    base().set("foo3", exited(0)).restartPolicy("foo3", v1.ContainerRestartPolicyOnFailure),
			want: sb(Actions{})},
		{name: "rules: Always pod whose only container (Never) exited: pod killed",
			f:    fixture{pod: testPod(v1.RestartPolicyAlways, "foo1"), st: &pleg.PodStatus{Sandboxes: []*runtimeapi.PodSandboxStatus{readySandbox(0)}}}.add("foo1", exited(1)).restartPolicy("foo1", v1.ContainerRestartPolicyNever),
			want: sb(Actions{KillPod: true})},
		{name: "rules: liveness failure of a container Never in an Always pod: killed, not to be restarted",
			f: base().restartPolicy("foo2", v1.ContainerRestartPolicyNever), probes: map[string]ProbeVerdict{"foo2-id": {Failed: "liveness"}},
			want: sb(Actions{KillContainers: map[string]string{"foo2-id": "Container foo2 failed liveness probe"}})},
		{name: "rules: liveness failure of a container Always in a Never pod: will be restarted",
			f: base().policy(v1.RestartPolicyNever).restartPolicy("foo2", v1.ContainerRestartPolicyAlways), probes: map[string]ProbeVerdict{"foo2-id": {Failed: "liveness"}},
			want: sb(Actions{KillContainers: map[string]string{"foo2-id": "Container foo2 failed liveness probe, will be restarted"}})},
		{name: "rules: dead sandbox of a Never pod with a restartable container: new sandbox for what restarts",
			f: base().policy(v1.RestartPolicyNever).deadSandbox(1).set("foo1", exited(42)).set("foo2", exited(0)).set("foo3", exited(1)).
				restartPolicy("foo1", v1.ContainerRestartPolicyNever, restartOn(v1.ContainerRestartRuleOnExitCodesOpIn, 42)),
			want: Actions{KillPod: true, CreateSandbox: true, Attempt: 2, StartContainers: []int{0}}},
		{name: "rules: dead sandbox of a Never pod whose rule does not match: no new sandbox",
			f: base().policy(v1.RestartPolicyNever).deadSandbox(1).set("foo1", exited(1)).set("foo2", exited(0)).set("foo3", exited(1)).
				restartPolicy("foo1", v1.ContainerRestartPolicyNever, restartOn(v1.ContainerRestartRuleOnExitCodesOpIn, 42)),
			want: Actions{KillPod: true, Attempt: 2}},
		{name: "rules: init container of a Never pod restarted by its rule",
			f:    withInits().policy(v1.RestartPolicyNever).set("init3", exited(42)).restartPolicy("init3", v1.ContainerRestartPolicyNever, restartOn(v1.ContainerRestartRuleOnExitCodesOpIn, 42)),
			want: sb(Actions{StartInit: []int{2}})},
		{name: "rules: init container Never in an Always pod fails the pod",
			f:    withInits().set("init3", exited(1)).restartPolicy("init3", v1.ContainerRestartPolicyNever),
			want: sb(Actions{KillPod: true, InitFailed: true})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ComputeActions(Facts{Pod: tt.f.pod, Status: tt.f.st, Now: t0, Probes: tt.probes})
			if diff := cmp.Diff(tt.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("ComputeActions() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// TestRecordedHash: the hash on a running container is compared whichever agent
// wrote it (nodelet writes the kubelet's own value), so an image change restarts
// a container the kubelet started, and a matching one is adopted. Only an older
// nodelet's "n"-prefixed hash, which cannot be compared, is adopted as is.
func TestRecordedHash(t *testing.T) {
	for _, tc := range []struct {
		name     string
		recorded string
		image    string // the spec's image; the container ran "busybox"
		restart  bool
	}{
		{"kubelet's hash, same image: adopted", kubeletHashAppBusybox, "busybox", false},
		{"kubelet's hash, new image: restarted", kubeletHashAppBusybox, "busybox:1.37", true},
		{"hash with leading zeros still matches", "0" + kubeletHashAppBusybox, "busybox", false},
		{"older nodelet's hash: adopted", "n468e852", "busybox", false},
		{"older nodelet's hash, new image: adopted", "n468e852", "busybox:1.37", false},
		{"no hash: adopted", "", "busybox:1.37", false},
		{"unparsable hash: restarted, as upstream reads it as 0", "zz", "busybox", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := testPod(v1.RestartPolicyAlways, "app")
			c := ctr(pod, "app", runtimeapi.ContainerState_CONTAINER_RUNNING, 0, 1)
			c.Annotations[cri.AnnotationContainerHash] = tc.recorded
			pod.Spec.Containers[0].Image = tc.image
			st := &pleg.PodStatus{Sandboxes: []*runtimeapi.PodSandboxStatus{readySandbox(0)}, Containers: []*runtimeapi.ContainerStatus{c}}
			got := ComputeActions(Facts{Pod: pod, Status: st, Now: t0})
			want := Actions{SandboxID: "sb"}
			if tc.restart {
				want.KillContainers = map[string]string{"app-id": "Container app definition changed, will be restarted"}
				want.StartContainers = []int{0}
			}
			if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("ComputeActions() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// Hashes the upstream kubelet v1.37.2 writes (see TestContainerHashMatchesUpstream
// in internal/podutil for where they come from).
const (
	kubeletHashAppBusybox    = "3ada567e" // name app, image busybox
	kubeletHashAppBusybox136 = "395745"   // name app, image busybox:1.36
)

// A start cut off by a crash is no crash of the container: it is started at once,
// whatever back-off its earlier failures built up.
func TestCutStartIgnoresBackOff(t *testing.T) {
	clk := testingclock.NewFakeClock(t0)
	bo := flowcontrol.NewFakeBackOff(10*time.Second, 5*time.Minute, clk)
	f := fixture{pod: testPod(v1.RestartPolicyAlways, "app"), st: &pleg.PodStatus{Sandboxes: []*runtimeapi.PodSandboxStatus{readySandbox(0)}}}
	bo.Next(BackoffKey(f.pod, &f.pod.Spec.Containers[0]), clk.Now())
	bo.Next(BackoffKey(f.pod, &f.pod.Spec.Containers[0]), clk.Now())
	for _, tc := range []struct {
		name  string
		state ctrState
		start bool
	}{
		{"cancelled start", startCancelled, true},
		{"lost start", startLost, true},
		{"own start failure", startFailed, false},
		{"crash", exited(1), false},
		{"creation's status lost by a restarted runtime", creationLost, true},
	} {
		f := f
		f.st = &pleg.PodStatus{Sandboxes: f.st.Sandboxes}
		f = f.add("app", tc.state)
		if tc.state.state != runtimeapi.ContainerState_CONTAINER_UNKNOWN {
			f.st.Containers[0].FinishedAt = clk.Now().UnixNano()
		}
		a := ComputeActions(gatherFacts(f.pod, f.st, clk.Now(), bo, nil, nil))
		if got := len(a.StartContainers) == 1; got != tc.start {
			t.Errorf("%s: started %v, want %v (actions %+v)", tc.name, got, tc.start, a)
		}
		if tc.start && len(a.KillContainers) > 0 {
			// The start removes it first (containerd force-stops an UNKNOWN one on removal);
			// a kill would leave it EXITED beside its replacement as a restart.
			t.Errorf("%s: killed %v, want it replaced by the start", tc.name, a.KillContainers)
		}
	}
}

// TestCrashLoopBackOffGrows checks the restart back-off: immediate first restart,
// then waits of 10s, 20s, 40s ... capped at 5m.
func TestCrashLoopBackOffGrows(t *testing.T) {
	clk := testingclock.NewFakeClock(t0)
	bo := flowcontrol.NewFakeBackOff(10*time.Second, 5*time.Minute, clk)
	pod := testPod(v1.RestartPolicyAlways, "app")
	key := BackoffKey(pod, &pod.Spec.Containers[0])
	var waits []time.Duration
	for i := 0; i < 7; i++ {
		c := ctr(pod, "app", runtimeapi.ContainerState_CONTAINER_EXITED, 1, int64(i))
		c.FinishedAt = clk.Now().UnixNano()
		st := &pleg.PodStatus{Sandboxes: []*runtimeapi.PodSandboxStatus{readySandbox(0)}, Containers: []*runtimeapi.ContainerStatus{c}}
		waited := time.Duration(0)
		for {
			a := ComputeActions(gatherFacts(pod, st, clk.Now(), bo, nil, nil))
			if len(a.StartContainers) == 1 {
				break
			}
			if a.Waiting["app"].Reason != "CrashLoopBackOff" || a.RequeueAfter <= 0 {
				t.Fatalf("restart %d: want CrashLoopBackOff with a requeue, got %+v", i, a)
			}
			clk.Step(a.RequeueAfter)
			waited += a.RequeueAfter
		}
		bo.Next(key, clk.Now()) // what startContainer records on a restart
		waits = append(waits, waited.Round(time.Second))
	}
	want := []time.Duration{0, 10 * time.Second, 20 * time.Second, 40 * time.Second, 80 * time.Second, 160 * time.Second, 300 * time.Second}
	for i := range want {
		if waits[i] != want[i] {
			t.Fatalf("back-off waits = %v, want %v", waits, want)
		}
	}
}
