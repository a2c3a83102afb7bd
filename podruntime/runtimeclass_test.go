package podruntime

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/record"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/userns"
)

// fakeClasses is the RuntimeClass lister: name → handler.
type fakeClasses map[string]string

func (f fakeClasses) LookupRuntimeHandler(_ context.Context, name *string) (string, error) {
	if name == nil || *name == "" {
		return "", nil
	}
	h, ok := f[*name]
	if !ok {
		return "", apierrors.NewNotFound(schema.GroupResource{Group: "node.k8s.io", Resource: "runtimeclass"}, *name)
	}
	return h, nil
}

// managerWithDeps is a Manager with the optional collaborators of deps.
func (r *syncRig) managerWithDeps(deps Deps) (*Manager, *record.FakeRecorder) {
	rec := record.NewFakeRecorder(1000)
	cfg := Config{RootDir: r.root, PodLogsDir: filepath.Join(r.root, "logs")}
	deps.Runtime, deps.Images, deps.Volumes, deps.Env = r.client, r.client, noVolumes{}, fakeSecrets{}
	deps.Node = func() NodeFacts { return NodeFacts{Name: "node1"} }
	deps.Recorder, deps.Clock = rec, clock.RealClock{}
	return New(cfg, deps), rec
}

// A pod's RuntimeClass picks the handler its sandbox runs with; a class that
// does not exist fails the sandbox with upstream's event and keeps the pod
// waiting, and the next sync after the class appears runs it.
func TestRuntimeClassHandlerAndMissingClass(t *testing.T) {
	r := newSyncRig(t)
	ctx := context.Background()
	classes := fakeClasses{"test": "runc-test"}
	m, rec := r.managerWithDeps(Deps{RuntimeClasses: classes})

	pod := syncPod("rc", v1.RestartPolicyAlways, nil, "app")
	pod.Spec.RuntimeClassName = ptr.To("test")
	if _, err := m.SyncPod(ctx, pod, r.status(pod)); err != nil {
		t.Fatal(err)
	}
	st := r.status(pod)
	if len(st.Sandboxes) != 1 {
		t.Fatalf("sandboxes = %d, want 1", len(st.Sandboxes))
	}
	if h := r.fake.SandboxRuntimeHandler(st.Sandboxes[0].Id); h != "runc-test" {
		t.Errorf("sandbox runtime handler = %q, want runc-test", h)
	}

	plain := syncPod("plain", v1.RestartPolicyAlways, nil, "app")
	if _, err := m.SyncPod(ctx, plain, r.status(plain)); err != nil {
		t.Fatal(err)
	}
	if h := r.fake.SandboxRuntimeHandler(r.status(plain).Sandboxes[0].Id); h != "" {
		t.Errorf("pod without a RuntimeClass: handler %q, want the default", h)
	}

	missing := syncPod("missing", v1.RestartPolicyAlways, nil, "app")
	missing.Spec.RuntimeClassName = ptr.To("gone")
	drain(rec)
	_, err := m.SyncPod(ctx, missing, r.status(missing))
	if err == nil || !strings.Contains(err.Error(), "CreatePodSandboxError") || !strings.Contains(err.Error(), `"gone" not found`) {
		t.Fatalf("sync error = %v, want CreatePodSandboxError naming the class", err)
	}
	if n := len(r.status(missing).Sandboxes); n != 0 {
		t.Fatalf("a pod of a missing RuntimeClass got %d sandboxes", n)
	}
	want := `Warning FailedCreatePodSandBox Failed to create pod sandbox: runtimeclass.node.k8s.io "gone" not found`
	if events := drain(rec); !slices.Contains(events, want) {
		t.Errorf("events %q lack %q", events, want)
	}

	classes["gone"] = "runc-test"
	if _, err := m.SyncPod(ctx, missing, r.status(missing)); err != nil {
		t.Fatalf("sync once the class exists: %v", err)
	}
	if got := r.containers(missing, "app"); !slices.Equal(got, []runtimeapi.ContainerState{runtimeapi.ContainerState_CONTAINER_RUNNING}) {
		t.Errorf("app after the class appeared = %v, want running", got)
	}
}

// Without an API server there are no RuntimeClasses: the name is not looked
// up and the default handler runs the pod, as upstream's kubelet without a client.
func TestRuntimeClassWithoutAPIServerUsesTheDefaultHandler(t *testing.T) {
	r := newSyncRig(t)
	m, _ := r.managerWithDeps(Deps{})
	pod := syncPod("static", v1.RestartPolicyAlways, nil, "app")
	pod.Spec.RuntimeClassName = ptr.To("anything")
	if _, err := m.SyncPod(context.Background(), pod, r.status(pod)); err != nil {
		t.Fatal(err)
	}
	if h := r.fake.SandboxRuntimeHandler(r.status(pod).Sandboxes[0].Id); h != "" {
		t.Errorf("handler %q, want the default", h)
	}
}

// The pod overhead its RuntimeClass set reaches the runtime beside the pod's
// own resources, as upstream's sandbox config carries both.
func TestSandboxConfigCarriesOverhead(t *testing.T) {
	r := newSyncRig(t)
	m, _ := r.managerWithDeps(Deps{})
	pod := syncPod("overhead", v1.RestartPolicyAlways, nil, "app")
	pod.Spec.Containers[0].Resources.Limits = v1.ResourceList{v1.ResourceMemory: resource.MustParse("64Mi")}
	pod.Spec.Overhead = v1.ResourceList{v1.ResourceMemory: resource.MustParse("32Mi"), v1.ResourceCPU: resource.MustParse("250m")}
	cfg, err := m.SandboxConfig(pod, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.GetLinux().GetResources().GetMemoryLimitInBytes(); got != 64<<20 {
		t.Errorf("sandbox resources memory = %d, want 64Mi (without overhead)", got)
	}
	if got := cfg.GetLinux().GetOverhead().GetMemoryLimitInBytes(); got != 32<<20 {
		t.Errorf("sandbox overhead memory = %d, want 32Mi", got)
	}
	if got := cfg.GetLinux().GetOverhead().GetCpuShares(); got != 256 {
		t.Errorf("sandbox overhead cpu shares = %d, want 256 (250m)", got)
	}
}

func usernsManager(t *testing.T, root string, hs ...*runtimeapi.RuntimeHandler) *userns.Manager {
	t.Helper()
	m, err := userns.Open(context.Background(), userns.Options{
		PodsDir: filepath.Join(root, "pods"), First: userns.UnitLength, Length: 16 * userns.UnitLength,
		IDsPerPod: userns.UnitLength, MaxPods: 16,
		Handlers: func() ([]*runtimeapi.RuntimeHandler, bool) { return hs, true },
		Intn:     func(int) int { return 0 }, // the first free range, so the test knows which
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func usernsHandler(name string, on bool) *runtimeapi.RuntimeHandler {
	return &runtimeapi.RuntimeHandler{Name: name, Features: &runtimeapi.RuntimeHandlerFeatures{UserNamespaces: on}}
}

// A hostUsers: false pod's sandbox and containers get the pod's range as
// NamespaceOption.UsernsOptions (mode POD); other pods say NODE. Removing the
// pod releases the range and its file.
func TestUserNamespacePassedToSandboxAndContainers(t *testing.T) {
	r := newSyncRig(t)
	ctx := context.Background()
	um := usernsManager(t, r.root, usernsHandler("", true))
	m, _ := r.managerWithDeps(Deps{UserNamespaces: um})

	pod := syncPod("userns", v1.RestartPolicyAlways, nil, "app")
	pod.Spec.HostUsers = ptr.To(false)
	if _, err := m.SyncPod(ctx, pod, r.status(pod)); err != nil {
		t.Fatal(err)
	}
	st := r.status(pod)
	sbNS := r.fake.SandboxConfig(st.Sandboxes[0].Id).GetLinux().GetSecurityContext().GetNamespaceOptions().GetUsernsOptions()
	if sbNS.GetMode() != runtimeapi.NamespaceMode_POD || len(sbNS.GetUids()) != 1 || len(sbNS.GetGids()) != 1 {
		t.Fatalf("sandbox userns = %v, want mode POD with one mapping", sbNS)
	}
	uid := sbNS.GetUids()[0]
	if uid.GetContainerId() != 0 || uid.GetHostId() == 0 || uid.GetLength() != 65536 {
		t.Errorf("uid mapping %v, want container 0 → a non-zero host ID, 65536 long", uid)
	}
	cNS := r.fake.ContainerConfig(st.Containers[0].Id).GetLinux().GetSecurityContext().GetNamespaceOptions().GetUsernsOptions()
	if cNS.String() != sbNS.String() {
		t.Errorf("container userns %v, want the sandbox's %v", cNS, sbNS)
	}
	file := filepath.Join(r.root, "pods", string(pod.UID), userns.MappingsFile)
	if _, err := os.Stat(file); err != nil {
		t.Fatalf("the pod's mapping is not kept: %v", err)
	}

	host := syncPod("hostusers", v1.RestartPolicyAlways, nil, "app")
	if _, err := m.SyncPod(ctx, host, r.status(host)); err != nil {
		t.Fatal(err)
	}
	if ns := r.fake.SandboxConfig(r.status(host).Sandboxes[0].Id).GetLinux().GetSecurityContext().GetNamespaceOptions().GetUsernsOptions(); ns.GetMode() != runtimeapi.NamespaceMode_NODE {
		t.Errorf("pod without hostUsers: userns %v, want NODE", ns)
	}

	if err := m.KillPod(ctx, pod, r.status(pod), ptr.To[int64](0)); err != nil {
		t.Fatal(err)
	}
	if err := m.RemovePod(ctx, pod.UID, r.status(pod), ""); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(file); !os.IsNotExist(err) {
		t.Errorf("mapping file of a removed pod: %v", err)
	}
	if _, err := os.Stat(filepath.Dir(file)); !os.IsNotExist(err) {
		t.Errorf("directory of a removed pod: %v", err)
	}
	// The released range goes to the next pod.
	next := syncPod("next", v1.RestartPolicyAlways, nil, "app")
	next.Spec.HostUsers = ptr.To(false)
	if _, err := m.SyncPod(ctx, next, r.status(next)); err != nil {
		t.Fatal(err)
	}
	got := r.fake.SandboxConfig(r.status(next).Sandboxes[0].Id).GetLinux().GetSecurityContext().GetNamespaceOptions().GetUsernsOptions()
	if got.GetUids()[0].GetHostId() != uid.GetHostId() {
		t.Errorf("next pod got %d, want the released %d", got.GetUids()[0].GetHostId(), uid.GetHostId())
	}
}

// A runtime handler without user namespaces refuses hostUsers: false with
// upstream's event; no sandbox runs in the host user namespace instead.
func TestUserNamespaceRefusedWithoutRuntimeSupport(t *testing.T) {
	cases := []struct {
		name      string
		handlers  []*runtimeapi.RuntimeHandler
		class     *string
		wantEvent string
	}{
		{name: "default handler", handlers: []*runtimeapi.RuntimeHandler{usernsHandler("", false)},
			wantEvent: "Warning FailedCreatePodSandBox Failed to create pod sandbox: can't set `spec.hostUsers: false`, runtime does not support user namespaces"},
		{name: "RuntimeClass handler", handlers: []*runtimeapi.RuntimeHandler{usernsHandler("", true), usernsHandler("runc-test", false)}, class: ptr.To("test"),
			wantEvent: "Warning FailedCreatePodSandBox Failed to create pod sandbox: can't set `spec.hostUsers: false`, RuntimeClass handler \"runc-test\" does not support user namespaces"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := newSyncRig(t)
			m, rec := r.managerWithDeps(Deps{UserNamespaces: usernsManager(t, r.root, tc.handlers...), RuntimeClasses: fakeClasses{"test": "runc-test"}})
			pod := syncPod("refused", v1.RestartPolicyAlways, nil, "app")
			pod.Spec.HostUsers = ptr.To(false)
			pod.Spec.RuntimeClassName = tc.class
			if _, err := m.SyncPod(context.Background(), pod, r.status(pod)); err == nil {
				t.Fatal("sync succeeded")
			}
			if n := len(r.status(pod).Sandboxes); n != 0 {
				t.Errorf("%d sandboxes, want none", n)
			}
			if events := drain(rec); !slices.Contains(events, tc.wantEvent) {
				t.Errorf("events %q lack %q", events, tc.wantEvent)
			}
		})
	}
}

// Without a user namespace manager a hostUsers: false pod is refused, never
// run in the host user namespace.
func TestUserNamespaceWithoutManagerIsRefused(t *testing.T) {
	r := newSyncRig(t)
	m, _ := r.managerWithDeps(Deps{})
	pod := syncPod("nomgr", v1.RestartPolicyAlways, nil, "app")
	pod.Spec.HostUsers = ptr.To(false)
	_, err := m.SyncPod(context.Background(), pod, r.status(pod))
	if err == nil || !strings.Contains(err.Error(), "hostUsers: false") {
		t.Fatalf("err = %v", err)
	}
	if n := len(r.status(pod).Sandboxes); n != 0 {
		t.Errorf("%d sandboxes, want none", n)
	}
}
