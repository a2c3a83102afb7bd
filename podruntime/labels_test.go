package podruntime

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"google.golang.org/protobuf/proto"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/cri"
	"github.com/nodelet/nodelet/pleg"
)

// TestContainerAnnotations: the annotations are the ones upstream's
// newContainerAnnotations writes (pkg/kubelet/kuberuntime/labels.go), key for
// key, so the kubelet reads nodelet's containers as its own. The hashes are
// the upstream kubelet's (TestContainerHashMatchesUpstream).
func TestContainerAnnotations(t *testing.T) {
	preStop := &v1.LifecycleHandler{HTTPGet: &v1.HTTPGetAction{Path: "/quit", Port: intstr.FromString("http")}}
	tests := []struct {
		name     string
		pod      *v1.Pod
		c        *v1.Container
		restarts int
		want     map[string]string
	}{
		{
			name: "plain", restarts: 0,
			pod: &v1.Pod{Spec: v1.PodSpec{TerminationGracePeriodSeconds: ptr.To[int64](30)}},
			c:   &v1.Container{Name: "app", Image: "busybox", TerminationMessagePath: "/dev/termination-log", TerminationMessagePolicy: v1.TerminationMessageReadFile},
			want: map[string]string{
				"io.kubernetes.container.hash":                     "3ada567e",
				"io.kubernetes.container.restartCount":             "0",
				"io.kubernetes.container.terminationMessagePath":   "/dev/termination-log",
				"io.kubernetes.container.terminationMessagePolicy": "File",
				"io.kubernetes.pod.terminationGracePeriod":         "30",
			},
		},
		{
			name: "being deleted, with a preStop hook and ports", restarts: 4,
			pod: &v1.Pod{ObjectMeta: metav1.ObjectMeta{DeletionGracePeriodSeconds: ptr.To[int64](5)},
				Spec: v1.PodSpec{TerminationGracePeriodSeconds: ptr.To[int64](60)}},
			c: &v1.Container{Name: "web", Image: "registry.k8s.io/e2e-test-images/agnhost:2.66.1", TerminationMessagePath: "/tmp/msg", TerminationMessagePolicy: v1.TerminationMessageFallbackToLogsOnError,
				Lifecycle: &v1.Lifecycle{PreStop: preStop},
				Ports:     []v1.ContainerPort{{Name: "http", ContainerPort: 80, Protocol: v1.ProtocolTCP}}},
			want: map[string]string{
				"io.kubernetes.container.hash":                     "c130154f",
				"io.kubernetes.container.restartCount":             "4",
				"io.kubernetes.container.terminationMessagePath":   "/tmp/msg",
				"io.kubernetes.container.terminationMessagePolicy": "FallbackToLogsOnError",
				"io.kubernetes.pod.terminationGracePeriod":         "60",
				"io.kubernetes.pod.deletionGracePeriod":            "5",
				"io.kubernetes.container.preStopHandler":           `{"httpGet":{"path":"/quit","port":"http"}}`,
				"io.kubernetes.container.ports":                    `[{"name":"http","containerPort":80,"protocol":"TCP"}]`,
			},
		},
		{
			name: "no grace period in the spec: none recorded, as upstream", restarts: 1,
			pod: &v1.Pod{},
			c:   &v1.Container{Name: "app", Image: "busybox"},
			want: map[string]string{
				"io.kubernetes.container.hash":                     "3ada567e",
				"io.kubernetes.container.restartCount":             "1",
				"io.kubernetes.container.terminationMessagePath":   "",
				"io.kubernetes.container.terminationMessagePolicy": "",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := containerAnnotations(tt.pod, tt.c, tt.restarts)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("containerAnnotations() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// TestRestoredSpec: what killing an orphaned container needs comes back from
// the annotations either agent wrote, as upstream's restoreSpecsFromContainerLabels.
func TestRestoredSpec(t *testing.T) {
	kubelet := map[string]string{ // as the kubelet writes them
		"io.kubernetes.container.hash":                   "1a2b3c",
		"io.kubernetes.container.restartCount":           "2",
		"io.kubernetes.container.terminationMessagePath": "/dev/termination-log",
		"io.kubernetes.pod.terminationGracePeriod":       "45",
		"io.kubernetes.container.preStopHandler":         `{"exec":{"command":["sh","-c","sleep 1"]}}`,
		"io.kubernetes.container.ports":                  `[{"name":"http","containerPort":8080,"protocol":"TCP"}]`,
	}
	tests := []struct {
		name      string
		ann       map[string]string
		want      *v1.Container
		wantGrace int64
		graceOK   bool
	}{
		{name: "kubelet's container", ann: kubelet, graceOK: true, wantGrace: 45,
			want: &v1.Container{Name: "app", TerminationMessagePath: "/dev/termination-log",
				Lifecycle: &v1.Lifecycle{PreStop: &v1.LifecycleHandler{Exec: &v1.ExecAction{Command: []string{"sh", "-c", "sleep 1"}}}},
				Ports:     []v1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: v1.ProtocolTCP}}}},
		{name: "deletion grace wins", graceOK: true, wantGrace: 3,
			ann:  map[string]string{"io.kubernetes.pod.terminationGracePeriod": "45", "io.kubernetes.pod.deletionGracePeriod": "3"},
			want: &v1.Container{Name: "app"}},
		{name: "malformed hook and ports left out", graceOK: false,
			ann:  map[string]string{"io.kubernetes.container.preStopHandler": "{", "io.kubernetes.container.ports": "x", "io.kubernetes.pod.terminationGracePeriod": "soon"},
			want: &v1.Container{Name: "app"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &runtimeapi.ContainerStatus{Labels: map[string]string{cri.LabelContainerName: "app"}, Annotations: tt.ann}
			if diff := cmp.Diff(tt.want, restoredSpec(c), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("restoredSpec() mismatch (-want +got):\n%s", diff)
			}
			if g, ok := RecordedGrace(c); ok != tt.graceOK || g != tt.wantGrace {
				t.Errorf("RecordedGrace() = %d, %v, want %d, %v", g, ok, tt.wantGrace, tt.graceOK)
			}
		})
	}
}

// TestKubeletCreatedPodIsAdopted: a sandbox and containers the upstream kubelet
// created (its labels and annotations only, none of nodelet's) need nothing
// done; their attempt and restart count carry on.
func TestKubeletCreatedPodIsAdopted(t *testing.T) {
	pod := testPod(v1.RestartPolicyAlways, "app")
	pod.Annotations = map[string]string{"kubernetes.io/config.source": "api", "kubernetes.io/config.seen": "2026-12-07T10:00:00Z"}
	sandbox := &runtimeapi.PodSandboxStatus{
		Id: "sb", State: runtimeapi.PodSandboxState_SANDBOX_READY,
		Metadata: &runtimeapi.PodSandboxMetadata{Name: "web", Namespace: "default", Uid: "uid-1", Attempt: 2},
		Labels:   map[string]string{cri.LabelPodName: "web", cri.LabelPodNamespace: "default", cri.LabelPodUID: "uid-1"},
		// newPodAnnotations: the pod's own annotations, nothing else.
		Annotations: pod.Annotations,
		Network:     &runtimeapi.PodSandboxNetworkStatus{Ip: "10.244.0.5"},
	}
	kubeletCtr := func(state runtimeapi.ContainerState, hash string) *runtimeapi.ContainerStatus {
		return &runtimeapi.ContainerStatus{
			Id: "app-id", State: state, CreatedAt: 1, FinishedAt: t0.Add(-time.Hour).UnixNano(),
			Metadata: &runtimeapi.ContainerMetadata{Name: "app", Attempt: 3},
			Labels:   map[string]string{cri.LabelPodName: "web", cri.LabelPodNamespace: "default", cri.LabelPodUID: "uid-1", cri.LabelContainerName: "app"},
			Annotations: map[string]string{"io.kubernetes.container.hash": hash, "io.kubernetes.container.restartCount": "3",
				"io.kubernetes.container.terminationMessagePath": "/dev/termination-log", "io.kubernetes.container.terminationMessagePolicy": "File",
				"io.kubernetes.pod.terminationGracePeriod": "30"},
		}
	}
	tests := []struct {
		name string
		c    *runtimeapi.ContainerStatus
		want Actions
	}{
		{"running, same image: nothing to do", kubeletCtr(runtimeapi.ContainerState_CONTAINER_RUNNING, kubeletHashAppBusybox),
			Actions{SandboxID: "sb"}},
		{"running, image changed since: restarted", kubeletCtr(runtimeapi.ContainerState_CONTAINER_RUNNING, kubeletHashAppBusybox136),
			Actions{SandboxID: "sb", KillContainers: map[string]string{"app-id": "Container app definition changed, will be restarted"}, StartContainers: []int{0}}},
		{"exited: restarted in the same sandbox", kubeletCtr(runtimeapi.ContainerState_CONTAINER_EXITED, kubeletHashAppBusybox),
			Actions{SandboxID: "sb", StartContainers: []int{0}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := &pleg.PodStatus{Sandboxes: []*runtimeapi.PodSandboxStatus{sandbox}, Containers: []*runtimeapi.ContainerStatus{tt.c}}
			got := ComputeActions(Facts{Pod: pod, Status: st, Now: t0})
			if diff := cmp.Diff(tt.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("ComputeActions() mismatch (-want +got):\n%s", diff)
			}
			if n := nextRestartCount(tt.c); n != 4 {
				t.Errorf("next restart count %d, want 4 (the kubelet's 3, plus one)", n)
			}
		})
	}
	// A sandbox recreated for the pod continues the kubelet's attempts.
	dead := proto.Clone(sandbox).(*runtimeapi.PodSandboxStatus)
	dead.State = runtimeapi.PodSandboxState_SANDBOX_NOTREADY
	if changed, attempt := sandboxChanged(pod, &pleg.PodStatus{Sandboxes: []*runtimeapi.PodSandboxStatus{dead}}); !changed || attempt != 3 {
		t.Errorf("sandboxChanged() = %v, %d, want a new sandbox with attempt 3", changed, attempt)
	}
}

// TestRestartCountFromLogDir: with no instance in the runtime, the count goes
// on from the log files, as upstream's calcRestartCountByLogDir.
func TestRestartCountFromLogDir(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files []string
		want  int
	}{
		{"no directory", nil, 0},
		{"empty", []string{}, 0},
		{"one log", []string{"0.log"}, 1},
		{"rotated logs count", []string{"0.log", "2.log.20261207-101010", "1.log"}, 3},
		{"other files ignored", []string{"x.log", "3.txt", "-1.log", "+5.log", "1x.log"}, 0},
		{"unanchored at the end, as upstream's pattern", []string{"4.logs"}, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "app")
			if tc.files != nil {
				if err := os.MkdirAll(filepath.Join(dir, "sub.log"), 0o755); err != nil {
					t.Fatal(err)
				}
				for _, f := range tc.files {
					if err := os.WriteFile(filepath.Join(dir, f), nil, 0o644); err != nil {
						t.Fatal(err)
					}
				}
			}
			if got := restartCountFromLogDir(dir); got != tc.want {
				t.Errorf("restartCountFromLogDir() = %d, want %d", got, tc.want)
			}
		})
	}
}

// TestOrphanRunsRecordedPreStop: a pod gone from every source (known by its
// name and UID only) still gets the preStop hook the kubelet (or nodelet)
// recorded on its container, as upstream's killContainer restores it.
func TestOrphanRunsRecordedPreStop(t *testing.T) {
	clk := testingclock.NewFakeClock(t0)
	rt := &recordingRuntime{}
	var hooked []string
	m, _ := hookManager(rt, fakeHooks{fn: func(_ context.Context, name string) (string, error) {
		hooked = append(hooked, name)
		clk.Step(time.Second)
		return "", nil
	}}, clk)
	withHook := &runtimeapi.ContainerStatus{Id: "a", State: runtimeapi.ContainerState_CONTAINER_RUNNING,
		Labels:      map[string]string{cri.LabelContainerName: "app"},
		Annotations: map[string]string{"io.kubernetes.container.preStopHandler": `{"exec":{"command":["drain"]}}`}}
	without := &runtimeapi.ContainerStatus{Id: "b", State: runtimeapi.ContainerState_CONTAINER_RUNNING,
		Labels: map[string]string{cri.LabelContainerName: "side"}}
	orphan := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "gone", Namespace: "default", UID: "uid-gone"}}
	st := &pleg.PodStatus{Containers: []*runtimeapi.ContainerStatus{withHook, without}}
	if err := m.KillPod(context.Background(), orphan, st, ptr.To[int64](10)); err != nil {
		t.Fatal(err)
	}
	if len(hooked) != 1 || hooked[0] != "app" {
		t.Errorf("preStop ran for %v, want [app]", hooked)
	}
}

// TestNextInstance: the attempt (unique per name, the log file's number) and
// the restart count (the status's restartCount) of a container's next
// instance. A start cut off by a crash never ran: no restart, whether its
// instance is gone (its attempt is reused) or the runtime keeps it (issue 33:
// containerd keeps the CREATED task of a NewTask it was killed in; the
// replacement beside it counted restart 1 on a never-exiting container).
func TestNextInstance(t *testing.T) {
	inst := func(attempt, restarts int, state runtimeapi.ContainerState, startedAt int64, reason, msg string) *runtimeapi.ContainerStatus {
		return &runtimeapi.ContainerStatus{
			Metadata: &runtimeapi.ContainerMetadata{Name: "app", Attempt: uint32(attempt)},
			State:    state, StartedAt: startedAt, Reason: reason, Message: msg,
			Annotations: map[string]string{cri.AnnotationContainerRestartCount: strconv.Itoa(restarts)},
		}
	}
	const exited, created, running = runtimeapi.ContainerState_CONTAINER_EXITED, runtimeapi.ContainerState_CONTAINER_CREATED, runtimeapi.ContainerState_CONTAINER_RUNNING
	cutNewTask := func(attempt, restarts int) *runtimeapi.ContainerStatus {
		return inst(attempt, restarts, created, 0, "", "")
	}
	ran := func(attempt, restarts int) *runtimeapi.ContainerStatus {
		return inst(attempt, restarts, exited, 1, "Completed", "")
	}
	for _, tc := range []struct {
		name       string
		instances  []*runtimeapi.ContainerStatus // newest first
		cutRemoved bool
		logDirNext int
		want       instanceNumbers
	}{
		{"first instance", nil, false, 0, instanceNumbers{0, 0}},
		{"none in the runtime: from the log dir, as upstream", nil, false, 3, instanceNumbers{3, 3}},
		{"the last one ran and exited: a restart", []*runtimeapi.ContainerStatus{ran(0, 0)}, false, 0, instanceNumbers{1, 1}},
		{"the kubelet's container (attempt = count): its count plus one", []*runtimeapi.ContainerStatus{ran(3, 3)}, false, 0, instanceNumbers{4, 4}},
		{"a start error of the container's own: a restart, as upstream",
			[]*runtimeapi.ContainerStatus{inst(0, 0, exited, 0, "StartError", `exec: "nope": executable file not found in $PATH`)}, false, 0, instanceNumbers{1, 1}},
		{"cut start removed: its attempt and count again", []*runtimeapi.ContainerStatus{cutNewTask(0, 0)}, true, 0, instanceNumbers{0, 0}},
		{"cut restart removed: its attempt and count again", []*runtimeapi.ContainerStatus{cutNewTask(1, 1), ran(0, 0)}, true, 0, instanceNumbers{1, 1}},
		{"cut start the runtime keeps: the next attempt beside it, no restart", []*runtimeapi.ContainerStatus{cutNewTask(0, 0)}, false, 0, instanceNumbers{1, 0}},
		{"cut restart the runtime keeps: the next attempt, the count it had",
			[]*runtimeapi.ContainerStatus{cutNewTask(1, 1), ran(0, 0)}, false, 0, instanceNumbers{2, 1}},
		{"cut by a runtime crash (exited Unknown, never started) and kept",
			[]*runtimeapi.ContainerStatus{inst(2, 2, exited, 0, "Unknown", ""), ran(1, 1)}, false, 0, instanceNumbers{3, 2}},
		{"the replacement beside a kept cut start exits: a restart, above both attempts",
			[]*runtimeapi.ContainerStatus{ran(1, 0), cutNewTask(0, 0)}, false, 0, instanceNumbers{2, 1}},
		{"running beside a kept cut start (a kill and restart): above every attempt",
			[]*runtimeapi.ContainerStatus{inst(1, 0, running, 1, "", ""), cutNewTask(0, 0)}, false, 0, instanceNumbers{2, 1}},
		{"a second cut start beside a kept one, removed: its own attempt",
			[]*runtimeapi.ContainerStatus{cutNewTask(1, 0), cutNewTask(0, 0)}, true, 0, instanceNumbers{1, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := nextInstance(tc.instances, tc.cutRemoved, tc.logDirNext); got != tc.want {
				t.Errorf("nextInstance() = %+v, want %+v", got, tc.want)
			}
		})
	}
}
