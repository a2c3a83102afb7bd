package volumes

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/csi"
)

func (f *fakeNode) NodeExpandVolume(_ context.Context, req *csipb.NodeExpandVolumeRequest, _ ...grpc.CallOption) (*csipb.NodeExpandVolumeResponse, error) {
	f.record("NodeExpandVolume")
	f.mu.Lock()
	defer f.mu.Unlock()
	f.expands = append(f.expands, req)
	if f.expandErr != nil {
		return nil, f.expandErr
	}
	return &csipb.NodeExpandVolumeResponse{CapacityBytes: req.GetCapacityRange().GetRequiredBytes()}, nil
}

func (f *fakeNode) setExpandErr(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.expandErr = err
}

// fakeClaimStatus applies status patches to the claims of a fakeClaims.
type fakeClaimStatus struct {
	claims *fakeClaims
	mu     sync.Mutex
	err    error
	n      int
}

func (w *fakeClaimStatus) PatchClaimStatus(_ context.Context, ns, name string, patch []byte) (*v1.PersistentVolumeClaim, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return nil, w.err
	}
	w.n++
	w.claims.mu.Lock()
	defer w.claims.mu.Unlock()
	cur := w.claims.pvcs[ns+"/"+name]
	b, _ := json.Marshal(cur)
	out, err := strategicpatch.StrategicMergePatch(b, patch, v1.PersistentVolumeClaim{})
	if err != nil {
		return nil, err
	}
	var pvc v1.PersistentVolumeClaim
	if err := json.Unmarshal(out, &pvc); err != nil {
		return nil, err
	}
	w.claims.pvcs[ns+"/"+name] = &pvc
	return pvc.DeepCopy(), nil
}

func (w *fakeClaimStatus) patches() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.n
}

func gi(n string) resource.Quantity { return resource.MustParse(n) }

// resizedClaim is a claim of size `status` asking for `spec`, with the
// storage resize status rs (as external-resizer leaves it).
func resizedClaim(spec, statusCap string, rs v1.ClaimResourceStatus, modes ...v1.PersistentVolumeAccessMode) *v1.PersistentVolumeClaim {
	if len(modes) == 0 {
		modes = []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce}
	}
	c := boundPVC("c1", "pv1")
	c.Spec.AccessModes = modes
	c.Spec.Resources.Requests = v1.ResourceList{v1.ResourceStorage: gi(spec)}
	c.Status.Capacity = v1.ResourceList{v1.ResourceStorage: gi(statusCap)}
	c.Status.AccessModes = modes
	if rs != "" {
		c.Status.AllocatedResources = v1.ResourceList{v1.ResourceStorage: gi(spec)}
		c.Status.AllocatedResourceStatuses = map[v1.ResourceName]v1.ClaimResourceStatus{v1.ResourceStorage: rs}
		c.Status.Conditions = []v1.PersistentVolumeClaimCondition{{Type: v1.PersistentVolumeClaimFileSystemResizePending, Status: v1.ConditionTrue}}
	}
	return c
}

func sizedPV(size string) *v1.PersistentVolume {
	pv := csiPV("pv1", "c1", "h1")
	pv.Spec.Capacity = v1.ResourceList{v1.ResourceStorage: gi(size)}
	return pv
}

func TestDecideExpand(t *testing.T) {
	block := sizedPV("10Mi")
	block.Spec.VolumeMode = ptr.To(v1.PersistentVolumeBlock)
	pending, inProgress := v1.PersistentVolumeClaimNodeResizePending, v1.PersistentVolumeClaimNodeResizeInProgress
	known := func(s string) *resource.Quantity { q := gi(s); return &q }
	for _, tc := range []struct {
		name      string
		f         expandFacts
		needsCaps bool
		want      expandDecision
	}{
		{name: "PV at the claim's size", f: expandFacts{pvc: resizedClaim("5Mi", "5Mi", ""), pv: sizedPV("5Mi")},
			want: expandDecision{action: expandNothing, known: gi("5Mi")}},
		{name: "PV at the known size", f: expandFacts{pvc: resizedClaim("10Mi", "5Mi", pending), pv: sizedPV("10Mi"), known: known("10Mi")},
			want: expandDecision{action: expandNothing, known: gi("10Mi")}},
		{name: "grown, resizer not done (no status)", f: expandFacts{pvc: resizedClaim("10Mi", "5Mi", ""), pv: sizedPV("10Mi")},
			want: expandDecision{action: expandWait, known: gi("5Mi")}},
		{name: "grown, controller resize in progress", f: expandFacts{pvc: resizedClaim("10Mi", "5Mi", v1.PersistentVolumeClaimControllerResizeInProgress), pv: sizedPV("10Mi")},
			want: expandDecision{action: expandWait, known: gi("5Mi")}},
		{name: "node resize infeasible: the resizer's turn", f: expandFacts{pvc: resizedClaim("10Mi", "5Mi", v1.PersistentVolumeClaimNodeResizeInfeasible), pv: sizedPV("10Mi")},
			want: expandDecision{action: expandWait, known: gi("5Mi")}},
		{name: "pending: capabilities first", f: expandFacts{pvc: resizedClaim("10Mi", "5Mi", pending), pv: sizedPV("10Mi")},
			needsCaps: true, want: expandDecision{action: expandNothing, known: gi("5Mi")}},
		{name: "pending: call", f: expandFacts{pvc: resizedClaim("10Mi", "5Mi", pending), pv: sizedPV("10Mi"), capsKnown: true, nodeExpand: true},
			want: expandDecision{action: expandCall, known: gi("5Mi"), markInProgress: true, updateClaim: true}},
		{name: "in progress (a retry): call", f: expandFacts{pvc: resizedClaim("10Mi", "5Mi", inProgress), pv: sizedPV("10Mi"), capsKnown: true, nodeExpand: true, known: known("5Mi")},
			want: expandDecision{action: expandCall, known: gi("5Mi"), markInProgress: true, updateClaim: true}},
		{name: "user changed the request after a final failure: infeasible on failure",
			f:    expandFacts{pvc: resizedClaim("20Mi", "5Mi", inProgress), pv: sizedPV("10Mi"), capsKnown: true, nodeExpand: true, failedFinal: true},
			want: expandDecision{action: expandCall, known: gi("5Mi"), markInProgress: true, updateClaim: true, infeasibleOnFailure: true}},
		{name: "no EXPAND_VOLUME: finished without a call", f: expandFacts{pvc: resizedClaim("10Mi", "5Mi", pending), pv: sizedPV("10Mi"), capsKnown: true},
			want: expandDecision{action: expandUnsupported, known: gi("10Mi"), updateClaim: true}},
		{name: "read-only", f: expandFacts{pvc: resizedClaim("10Mi", "5Mi", pending), pv: sizedPV("10Mi"), readOnly: true},
			want: expandDecision{action: expandReadOnly, known: gi("10Mi")}},
		{name: "block volume", f: expandFacts{pvc: resizedClaim("10Mi", "5Mi", pending), pv: block},
			want: expandDecision{action: expandSettle, known: gi("10Mi")}},
		{name: "claim already updated (RWO): settled", f: expandFacts{pvc: resizedClaim("10Mi", "10Mi", ""), pv: sizedPV("10Mi"), known: known("5Mi")},
			want: expandDecision{action: expandSettle, known: gi("10Mi")}},
		{name: "claim already updated by another node (RWX): call, claim untouched",
			f:    expandFacts{pvc: resizedClaim("10Mi", "10Mi", "", v1.ReadWriteMany), pv: sizedPV("10Mi"), known: known("5Mi"), capsKnown: true, nodeExpand: true},
			want: expandDecision{action: expandCall, known: gi("5Mi")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, needsCaps := decideExpand(&tc.f)
			if needsCaps != tc.needsCaps {
				t.Fatalf("needsCaps = %v; want %v", needsCaps, tc.needsCaps)
			}
			if needsCaps {
				return
			}
			got.reason, got.newSize = "", resource.Quantity{}
			if got.action != tc.want.action || got.known.Cmp(tc.want.known) != 0 || got.markInProgress != tc.want.markInProgress ||
				got.updateClaim != tc.want.updateClaim || got.infeasibleOnFailure != tc.want.infeasibleOnFailure {
				t.Errorf("decideExpand = %+v (known %s); want %+v (known %s)", got, got.known.String(), tc.want, tc.want.known.String())
			}
		})
	}
}

func TestExpandFailure(t *testing.T) {
	for _, tc := range []struct {
		err                      error
		final, infeasible, inUse bool
	}{
		{status.Error(codes.Internal, "x"), true, false, false},
		{status.Error(codes.OutOfRange, "x"), true, true, false},
		{status.Error(codes.InvalidArgument, "x"), true, true, false},
		{status.Error(codes.NotFound, "x"), true, true, false},
		{status.Error(codes.FailedPrecondition, "x"), true, false, true},
		{status.Error(codes.DeadlineExceeded, "x"), false, false, false},
		{status.Error(codes.Unavailable, "x"), false, false, false},
		{errors.New("no connection"), false, false, false},
	} {
		final, infeasible, inUse := expandFailure(tc.err)
		if final != tc.final || infeasible != tc.infeasible || inUse != tc.inUse {
			t.Errorf("%v: final %v infeasible %v inUse %v; want %v %v %v", tc.err, final, infeasible, inUse, tc.final, tc.infeasible, tc.inUse)
		}
	}
}

// TestClaimResizeStatus: the claim status writes and their patches touch
// only what nodes may patch (capacity, conditions, allocatedResourceStatuses).
func TestClaimResizeStatus(t *testing.T) {
	pvc := resizedClaim("10Mi", "5Mi", v1.PersistentVolumeClaimNodeResizePending)
	pvc.Status.Conditions = append(pvc.Status.Conditions, v1.PersistentVolumeClaimCondition{Type: "Other", Status: v1.ConditionTrue})

	ip := claimResizeInProgress(pvc)
	if ip.Status.AllocatedResourceStatuses[v1.ResourceStorage] != v1.PersistentVolumeClaimNodeResizeInProgress ||
		pvc.Status.AllocatedResourceStatuses[v1.ResourceStorage] != v1.PersistentVolumeClaimNodeResizePending {
		t.Errorf("in progress: %v (input %v)", ip.Status.AllocatedResourceStatuses, pvc.Status.AllocatedResourceStatuses)
	}

	done := claimResizeFinished(ip, gi("10Mi"))
	if q := done.Status.Capacity[v1.ResourceStorage]; q.Cmp(gi("10Mi")) != 0 || done.Status.AllocatedResourceStatuses != nil ||
		len(done.Status.Conditions) != 1 || done.Status.Conditions[0].Type != "Other" {
		t.Errorf("finished: %+v", done.Status)
	}
	if q := done.Status.AllocatedResources[v1.ResourceStorage]; q.Cmp(gi("10Mi")) != 0 {
		t.Errorf("finished: allocatedResources %v changed", done.Status.AllocatedResources)
	}
	patch, err := claimStatusPatch(ip, done)
	if err != nil {
		t.Fatal(err)
	}
	var p map[string]any
	if err := json.Unmarshal(patch, &p); err != nil {
		t.Fatal(err)
	}
	if len(p) != 1 || p["status"] == nil {
		t.Errorf("patch %s touches more than the status", patch)
	}
	for _, want := range []string{`"capacity":{"storage":"10Mi"}`, `"allocatedResourceStatuses":null`, `"FileSystemResizePending"`} {
		if !strings.Contains(string(patch), want) {
			t.Errorf("patch %s lacks %s", patch, want)
		}
	}

	now := metav1.Now()
	failed := claimResizeFailed(ip, errors.New("boom"), false, now)
	c := failed.Status.Conditions[len(failed.Status.Conditions)-1]
	if c.Type != v1.PersistentVolumeClaimNodeResizeError || c.Message != "failed to expand pvc with boom" ||
		failed.Status.AllocatedResourceStatuses[v1.ResourceStorage] != v1.PersistentVolumeClaimNodeResizeInProgress {
		t.Errorf("failed: %+v", failed.Status)
	}
	again := claimResizeFailed(failed, errors.New("bust"), true, now)
	var n int
	for _, c := range again.Status.Conditions {
		if c.Type == v1.PersistentVolumeClaimNodeResizeError {
			n++
		}
	}
	if n != 1 || again.Status.AllocatedResourceStatuses[v1.ResourceStorage] != v1.PersistentVolumeClaimNodeResizeInfeasible {
		t.Errorf("failed twice, infeasible: %+v", again.Status)
	}
}

// expandRig is a CSI rig whose manager expands claims.
func expandRig(t *testing.T, caps ...csipb.NodeServiceCapability_RPC_Type) (*csiRig, *fakeClaimStatus, *record.FakeRecorder) {
	r := newCSIRig(t, caps...)
	w := &fakeClaimStatus{claims: r.claims}
	rec := record.NewFakeRecorder(100)
	WithClaimExpansion(w, rec)(r.m)
	r.objs.putDriver(csiDriverObject(false, storagev1.FileFSGroupPolicy))
	return r, w, rec
}

func events(rec *record.FakeRecorder) []string {
	var out []string
	for {
		select {
		case e := <-rec.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

func (f *fakeClaims) claim(name string) *v1.PersistentVolumeClaim {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.pvcs["ns1/"+name].DeepCopy()
}

// TestCSIExpandOnline: a mounted volume whose claim was resized (the PV grew,
// NodeResizePending) is expanded once on a later sync, with the publish and
// staging paths and the new size; the claim's status is finished and the
// pod and claim get FileSystemResizeSuccessful.
func TestCSIExpandOnline(t *testing.T) {
	requireRoot(t)
	r, w, rec := expandRig(t, csipb.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME, csipb.NodeServiceCapability_RPC_EXPAND_VOLUME)
	ctx := context.Background()
	pv := sizedPV("5Mi")
	pv.Spec.CSI.NodeExpandSecretRef = &v1.SecretReference{Namespace: "sec", Name: "exp"}
	r.kube.secrets = map[string]*v1.Secret{"sec/exp": {Data: map[string][]byte{"k": []byte("v")}}}
	r.claims.put(resizedClaim("5Mi", "5Mi", ""), pv)
	pod := claimPod(claimVolume("data", "c1", false))
	pod.Spec.NodeName = "node1"
	if _, err := r.m.SetUpPod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if n := r.node.count("NodeExpandVolume"); n != 0 {
		t.Fatalf("NodeExpandVolume before a resize: %d calls", n)
	}

	// The resizer grew the volume but has not handed it to the node yet.
	r.claims.put(resizedClaim("10Mi", "5Mi", ""), sizedPVWithSecret(pv, "10Mi"))
	if _, err := r.m.SetUpPod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if n := r.node.count("NodeExpandVolume"); n != 0 {
		t.Fatalf("NodeExpandVolume before NodeResizePending: %d calls", n)
	}
	r.claims.put(resizedClaim("10Mi", "5Mi", v1.PersistentVolumeClaimNodeResizePending))
	for range 3 {
		if _, err := r.m.SetUpPod(ctx, pod); err != nil {
			t.Fatal(err)
		}
	}
	if n := r.node.count("NodeExpandVolume"); n != 1 {
		t.Fatalf("NodeExpandVolume called %d times; want 1", n)
	}
	req := r.node.expands[0]
	if req.VolumeId != "h1" || req.VolumePath != csi.PublishPath(r.root, pod.UID, "pv1") ||
		req.StagingTargetPath != csi.StagingPath(r.root, testDriver, "h1") || req.CapacityRange.GetRequiredBytes() != 10<<20 ||
		req.VolumeCapability.GetMount().GetFsType() != "ext4" || req.Secrets["k"] != "v" ||
		req.VolumeCapability.GetAccessMode().GetMode() != csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER {
		t.Errorf("NodeExpandVolume request: %v", req)
	}
	got := r.claims.claim("c1")
	if q := got.Status.Capacity[v1.ResourceStorage]; q.Cmp(gi("10Mi")) != 0 || got.Status.AllocatedResourceStatuses != nil || len(got.Status.Conditions) != 0 {
		t.Errorf("claim status after expansion: %+v", got.Status)
	}
	if w.patches() != 2 {
		t.Errorf("%d status patches; want 2 (in progress, finished)", w.patches())
	}
	want := `Normal FileSystemResizeSuccessful MountVolume.NodeExpandVolume succeeded for volume "pv1" node1`
	if ev := events(rec); len(ev) != 2 || ev[0] != want || ev[1] != want {
		t.Errorf("events %q; want twice %q (pod, claim)", ev, want)
	}

	// A restarted manager knows the size from the claim: no second call.
	m2 := r.restarted(t)
	WithClaimExpansion(w, rec)(m2)
	if _, err := m2.SetUpPod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if n := r.node.count("NodeExpandVolume"); n != 1 {
		t.Errorf("NodeExpandVolume after a restart: %d calls; want 1", n)
	}
}

func sizedPVWithSecret(pv *v1.PersistentVolume, size string) *v1.PersistentVolume {
	out := pv.DeepCopy()
	out.Spec.Capacity = v1.ResourceList{v1.ResourceStorage: gi(size)}
	return out
}

// TestCSIExpandFailures: a transient failure is a VolumeResizeFailed event
// and is retried on the next sync; a final one also sets NodeResizeError
// (InvalidArgument: NodeResizeInfeasible); the pod's volume stays usable.
func TestCSIExpandFailures(t *testing.T) {
	requireRoot(t)
	r, _, rec := expandRig(t, csipb.NodeServiceCapability_RPC_EXPAND_VOLUME)
	ctx := context.Background()
	r.claims.put(resizedClaim("10Mi", "5Mi", v1.PersistentVolumeClaimNodeResizePending), sizedPV("10Mi"))
	pod := claimPod(claimVolume("data", "c1", false))

	r.node.setExpandErr(status.Error(codes.Unavailable, "driver busy"))
	vols, err := r.m.SetUpPod(ctx, pod)
	if err != nil || vols["data"].Path == "" {
		t.Fatalf("SetUpPod with a failing expansion: %v, %v", vols, err)
	}
	ev := events(rec)
	if len(ev) != 1 || !strings.HasPrefix(ev[0], `Warning VolumeResizeFailed NodeExpandVolume.NodeExpandVolume failed for volume "pv1" : Expander.NodeExpand failed to expand the volume : rpc error: code = Unavailable`) {
		t.Errorf("events %q", ev)
	}
	got := r.claims.claim("c1")
	if got.Status.AllocatedResourceStatuses[v1.ResourceStorage] != v1.PersistentVolumeClaimNodeResizeInProgress {
		t.Errorf("claim after a transient failure: %+v", got.Status)
	}

	r.node.setExpandErr(status.Error(codes.Internal, "disk on fire"))
	if _, err := r.m.SetUpPod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	got = r.claims.claim("c1")
	if c := got.Status.Conditions[len(got.Status.Conditions)-1]; c.Type != v1.PersistentVolumeClaimNodeResizeError ||
		!strings.Contains(c.Message, "failed to expand pvc with rpc error: code = Internal desc = disk on fire") {
		t.Errorf("claim after a final failure: %+v", got.Status)
	}

	r.node.setExpandErr(status.Error(codes.OutOfRange, "too big"))
	if _, err := r.m.SetUpPod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	got = r.claims.claim("c1")
	if got.Status.AllocatedResourceStatuses[v1.ResourceStorage] != v1.PersistentVolumeClaimNodeResizeInfeasible {
		t.Errorf("claim after an infeasible failure: %+v", got.Status)
	}
	if n := r.node.count("NodeExpandVolume"); n != 3 {
		t.Errorf("NodeExpandVolume called %d times; want 3", n)
	}
	// Infeasible: the resizer's turn, the node waits.
	if _, err := r.m.SetUpPod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if n := r.node.count("NodeExpandVolume"); n != 3 {
		t.Errorf("NodeExpandVolume after NodeResizeInfeasible: %d calls; want 3", n)
	}
}

// TestCSIExpandUnsupported: a driver without EXPAND_VOLUME is not called;
// the claim's resize is marked finished.
func TestCSIExpandUnsupported(t *testing.T) {
	requireRoot(t)
	r, _, _ := expandRig(t)
	ctx := context.Background()
	r.claims.put(resizedClaim("10Mi", "5Mi", v1.PersistentVolumeClaimNodeResizePending), sizedPV("10Mi"))
	if _, err := r.m.SetUpPod(ctx, claimPod(claimVolume("data", "c1", false))); err != nil {
		t.Fatal(err)
	}
	if n := r.node.count("NodeExpandVolume"); n != 0 {
		t.Errorf("NodeExpandVolume called %d times", n)
	}
	got := r.claims.claim("c1")
	if q := got.Status.Capacity[v1.ResourceStorage]; q.Cmp(gi("10Mi")) != 0 || got.Status.AllocatedResourceStatuses != nil {
		t.Errorf("claim status: %+v", got.Status)
	}
}
