package volumes

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/internal/mountutil"
)

// fakeKube is a hand-written KubeGetter that records its calls.
type fakeKube struct {
	mu       sync.Mutex
	cms      map[string]*v1.ConfigMap // ns/name
	secrets  map[string]*v1.Secret
	clock    *clocktesting.FakeClock
	tokenErr error
	calls    []string
	tokReqs  []*authenticationv1.TokenRequest
	tokenN   int
}

func (f *fakeKube) GetConfigMap(_ context.Context, ns, name string) (*v1.ConfigMap, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "cm:"+ns+"/"+name)
	if cm, ok := f.cms[ns+"/"+name]; ok {
		return cm.DeepCopy(), nil
	}
	return nil, apierrors.NewNotFound(v1.Resource("configmaps"), name)
}

func (f *fakeKube) GetSecret(_ context.Context, ns, name string) (*v1.Secret, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "secret:"+ns+"/"+name)
	if s, ok := f.secrets[ns+"/"+name]; ok {
		return s.DeepCopy(), nil
	}
	return nil, apierrors.NewNotFound(v1.Resource("secrets"), name)
}

func (f *fakeKube) CreateToken(_ context.Context, ns, sa string, req *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "token:"+ns+"/"+sa)
	f.tokReqs = append(f.tokReqs, req.DeepCopy())
	if f.tokenErr != nil {
		return nil, f.tokenErr
	}
	f.tokenN++
	out := req.DeepCopy()
	out.Status.Token = fmt.Sprintf("token-%d", f.tokenN)
	out.Status.ExpirationTimestamp = metav1.NewTime(f.clock.Now().Add(time.Duration(*req.Spec.ExpirationSeconds) * time.Second))
	return out, nil
}

func (f *fakeKube) count(prefix string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, c := range f.calls {
		if strings.HasPrefix(c, prefix) {
			n++
		}
	}
	return n
}

var t0 = time.Date(2026, 12, 2, 13, 0, 0, 0, time.UTC)

func newTestManager(t *testing.T, kube *fakeKube, opts ...Option) (*Manager, string, *clocktesting.FakeClock) {
	t.Helper()
	root := t.TempDir()
	clk := clocktesting.NewFakeClock(t0)
	var kg KubeGetter
	if kube != nil {
		kube.clock = clk
		kg = kube
	}
	m := NewManager(root, kg, clk, opts...)
	return m, root, clk
}

func testPod(vols ...v1.Volume) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns1", Name: "web", UID: "uid-1",
			Labels: map[string]string{"app": "web"}, Annotations: map[string]string{"note": "a\nb"}},
		Spec: v1.PodSpec{
			ServiceAccountName: "sa1",
			Containers: []v1.Container{{Name: "main", Resources: v1.ResourceRequirements{
				Limits: v1.ResourceList{v1.ResourceMemory: resource.MustParse("256Mi")},
			}}},
			Volumes: vols,
		},
	}
}

// tearDownOnCleanup keeps mounts from outliving a test (TempDir removal
// would fail on a mounted tmpfs).
func tearDownOnCleanup(t *testing.T, m *Manager, uid types.UID) {
	t.Cleanup(func() {
		if err := m.TearDownPod(context.Background(), uid); err != nil {
			t.Errorf("cleanup teardown: %v", err)
		}
	})
}

func volPath(root string, uid types.UID, plugin, name string) string {
	return filepath.Join(root, "pods", string(uid), "volumes", plugin, name)
}

func mustRead(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("read %s: %v", p, err)
	}
	return string(b)
}

func mode(t *testing.T, p string) os.FileMode {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatalf("stat %s: %v", p, err)
	}
	return fi.Mode().Perm()
}

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount tmpfs")
	}
}

func dataTarget(t *testing.T, dir string) string {
	t.Helper()
	target, err := os.Readlink(filepath.Join(dir, "..data"))
	if err != nil {
		t.Fatalf("..data in %s: %v", dir, err)
	}
	return target
}

func TestConfigMapVolume(t *testing.T) {
	cm := &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns1", Name: "cfg", ResourceVersion: "1"},
		Data: map[string]string{"app.conf": "level=info", "other": "o"}, BinaryData: map[string][]byte{"bin": {0, 1, 2}}}

	tests := []struct {
		name      string
		src       v1.ConfigMapVolumeSource
		cms       map[string]*v1.ConfigMap
		wantFiles map[string]string // path -> content
		wantModes map[string]os.FileMode
		wantErr   string
	}{
		{
			name:      "all keys with default mode 0644",
			src:       v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: "cfg"}},
			cms:       map[string]*v1.ConfigMap{"ns1/cfg": cm},
			wantFiles: map[string]string{"app.conf": "level=info", "other": "o", "bin": "\x00\x01\x02"},
			wantModes: map[string]os.FileMode{"app.conf": 0o644, "bin": 0o644},
		},
		{
			name: "items with paths, defaultMode and per-item mode",
			src: v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: "cfg"}, DefaultMode: ptr.To[int32](0o600),
				Items: []v1.KeyToPath{{Key: "app.conf", Path: "etc/app.conf"}, {Key: "other", Path: "o.txt", Mode: ptr.To[int32](0o444)}}},
			cms:       map[string]*v1.ConfigMap{"ns1/cfg": cm},
			wantFiles: map[string]string{"etc/app.conf": "level=info", "o.txt": "o"},
			wantModes: map[string]os.FileMode{"etc/app.conf": 0o600, "o.txt": 0o444},
		},
		{
			name:      "optional missing configMap gives an empty volume",
			src:       v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: "nope"}, Optional: ptr.To(true)},
			wantFiles: map[string]string{},
		},
		{
			name:    "required missing configMap",
			src:     v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: "nope"}},
			wantErr: `MountVolume.SetUp failed for volume "cfg-vol" : configmap "nope" not found`,
		},
		{
			name:    "required missing key",
			src:     v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: "cfg"}, Items: []v1.KeyToPath{{Key: "missing", Path: "m"}}},
			cms:     map[string]*v1.ConfigMap{"ns1/cfg": cm},
			wantErr: "configmap references non-existent config key: missing",
		},
		{
			name: "optional configMap with a missing key skips it",
			src: v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: "cfg"}, Optional: ptr.To(true),
				Items: []v1.KeyToPath{{Key: "missing", Path: "m"}, {Key: "other", Path: "o"}}},
			cms:       map[string]*v1.ConfigMap{"ns1/cfg": cm},
			wantFiles: map[string]string{"o": "o"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			kube := &fakeKube{cms: tt.cms}
			m, root, _ := newTestManager(t, kube)
			pod := testPod(v1.Volume{Name: "cfg-vol", VolumeSource: v1.VolumeSource{ConfigMap: &tt.src}})
			tearDownOnCleanup(t, m, pod.UID)
			got, err := m.SetUpPod(context.Background(), pod)
			if tt.wantErr != "" {
				var se *SetUpError
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.As(err, &se) || se.Volume != "cfg-vol" {
					t.Fatalf("error = %v, want SetUpError containing %q", err, tt.wantErr)
				}
				if _, ok := got["cfg-vol"]; ok {
					t.Error("failed volume present in result")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			dir := volPath(root, pod.UID, pluginConfigMap, "cfg-vol")
			if hv := got["cfg-vol"]; hv.Path != dir || !hv.ReadOnly {
				t.Errorf("HostVolume = %+v, want read-only %s", hv, dir)
			}
			dataTarget(t, dir)
			visible := 0
			for _, n := range listDir(t, dir) {
				if !strings.HasPrefix(n, "..") {
					visible++
				}
			}
			tops := map[string]bool{}
			for p, content := range tt.wantFiles {
				tops[strings.Split(p, "/")[0]] = true
				if got := mustRead(t, filepath.Join(dir, p)); got != content {
					t.Errorf("%s = %q, want %q", p, got, content)
				}
			}
			if visible != len(tops) {
				t.Errorf("dir has %d visible entries (%v), want %d", visible, listDir(t, dir), len(tops))
			}
			for p, md := range tt.wantModes {
				if got := mode(t, filepath.Join(dir, p)); got != md {
					t.Errorf("%s mode %v, want %v", p, got, md)
				}
			}
		})
	}
}

func TestConfigMapVolumeUpdatesAtomically(t *testing.T) {
	kube := &fakeKube{cms: map[string]*v1.ConfigMap{"ns1/cfg": {Data: map[string]string{"k": "v1", "drop": "x"}}}}
	m, root, clk := newTestManager(t, kube)
	pod := testPod(v1.Volume{Name: "c", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{
		LocalObjectReference: v1.LocalObjectReference{Name: "cfg"}}}})
	tearDownOnCleanup(t, m, pod.UID)
	ctx := context.Background()
	dir := volPath(root, pod.UID, pluginConfigMap, "c")

	if _, err := m.SetUpPod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	first := dataTarget(t, dir)

	// Unchanged: fetched again, nothing rewritten.
	clk.Step(time.Second)
	if _, err := m.SetUpPod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if got := dataTarget(t, dir); got != first {
		t.Errorf("unchanged configMap rewrote data: %s -> %s", first, got)
	}
	if n := kube.count("cm:"); n != 2 {
		t.Errorf("configMap fetched %d times, want 2", n)
	}

	kube.mu.Lock()
	kube.cms["ns1/cfg"] = &v1.ConfigMap{Data: map[string]string{"k": "v2", "new": "n"}}
	kube.mu.Unlock()
	clk.Step(time.Second)
	if _, err := m.SetUpPod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	second := dataTarget(t, dir)
	if second == first {
		t.Fatal("..data not swapped after the configMap changed")
	}
	if _, err := os.Stat(filepath.Join(dir, first)); !os.IsNotExist(err) {
		t.Errorf("old data dir %s not removed: %v", first, err)
	}
	if got := mustRead(t, filepath.Join(dir, "k")); got != "v2" {
		t.Errorf("k = %q, want v2", got)
	}
	if got := mustRead(t, filepath.Join(dir, "new")); got != "n" {
		t.Errorf("new = %q", got)
	}
	if _, err := os.Lstat(filepath.Join(dir, "drop")); !os.IsNotExist(err) {
		t.Errorf("dropped key still present: %v", err)
	}
	if target, _ := os.Readlink(filepath.Join(dir, "k")); target != "..data/k" {
		t.Errorf("k -> %q", target)
	}
}

func TestSecretVolumeOnTmpfs(t *testing.T) {
	requireRoot(t)
	kube := &fakeKube{secrets: map[string]*v1.Secret{"ns1/s": {Data: map[string][]byte{"password": []byte("pw")}}}}
	m, root, _ := newTestManager(t, kube)
	pod := testPod(v1.Volume{Name: "sec", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: "s"}}})
	tearDownOnCleanup(t, m, pod.UID)
	got, err := m.SetUpPod(context.Background(), pod)
	if err != nil {
		t.Fatal(err)
	}
	dir := volPath(root, pod.UID, pluginSecret, "sec")
	if !got["sec"].ReadOnly || got["sec"].Path != dir {
		t.Errorf("HostVolume %+v", got["sec"])
	}
	if mustRead(t, filepath.Join(dir, "password")) != "pw" || mode(t, filepath.Join(dir, "password")) != 0o644 {
		t.Error("secret file content or mode wrong")
	}
	if mounted, err := mountutil.IsMountPoint(dir); err != nil || !mounted {
		t.Errorf("secret volume not on its own mount: %v %v", mounted, err)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil || st.Type != unix.TMPFS_MAGIC {
		t.Errorf("secret volume fs type %x (%v), want tmpfs", st.Type, err)
	}
	// Sized to the pod's memory limit (256Mi).
	if size := int64(st.Blocks) * st.Bsize; size != 256<<20 {
		t.Errorf("tmpfs size %d, want %d", size, 256<<20)
	}

	// A second setup must not stack another mount.
	if _, err := m.SetUpPod(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	mps, _ := mountutil.PointsUnder(dir)
	if len(mps) != 1 {
		t.Errorf("mounts at %s after repeat: %v", dir, mps)
	}

	missing := testPod(v1.Volume{Name: "sec", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: "absent"}}})
	missing.UID = "uid-2"
	tearDownOnCleanup(t, m, missing.UID)
	if _, err := m.SetUpPod(context.Background(), missing); err == nil || !strings.Contains(err.Error(), `secret "absent" not found`) {
		t.Errorf("missing secret error = %v", err)
	}
}

func TestDownwardAPIVolume(t *testing.T) {
	m, root, _ := newTestManager(t, &fakeKube{}, WithoutTmpfs(), WithNodeAllocatable(func() v1.ResourceList {
		return v1.ResourceList{v1.ResourceCPU: resource.MustParse("4"), v1.ResourceMemory: resource.MustParse("8Gi")}
	}))
	items := []v1.DownwardAPIVolumeFile{
		{Path: "labels", FieldRef: &v1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.labels"}},
		{Path: "annotations", FieldRef: &v1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.annotations"}},
		{Path: "name", FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.name"}},
		{Path: "ns", FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.namespace"}},
		{Path: "uid", FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.uid"}, Mode: ptr.To[int32](0o400)},
		{Path: "mem_mi", ResourceFieldRef: &v1.ResourceFieldSelector{ContainerName: "main", Resource: "limits.memory", Divisor: resource.MustParse("1Mi")}},
		{Path: "cpu_limit", ResourceFieldRef: &v1.ResourceFieldSelector{ContainerName: "main", Resource: "limits.cpu"}},
		{Path: "cpu_req_m", ResourceFieldRef: &v1.ResourceFieldSelector{ContainerName: "main", Resource: "requests.cpu", Divisor: resource.MustParse("1m")}},
	}
	pod := testPod(v1.Volume{Name: "info", VolumeSource: v1.VolumeSource{DownwardAPI: &v1.DownwardAPIVolumeSource{Items: items}}})
	pod.Labels["tier"] = "front"
	tearDownOnCleanup(t, m, pod.UID)
	if _, err := m.SetUpPod(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	dir := volPath(root, pod.UID, pluginDownwardAPI, "info")
	want := map[string]string{
		"labels":      "app=\"web\"\ntier=\"front\"",
		"annotations": `note="a\nb"`,
		"name":        "web",
		"ns":          "ns1",
		"uid":         "uid-1",
		"mem_mi":      "256",
		"cpu_limit":   "4", // unset limit: node allocatable
		"cpu_req_m":   "0",
	}
	for p, w := range want {
		if got := mustRead(t, filepath.Join(dir, p)); got != w {
			t.Errorf("%s = %q, want %q", p, got, w)
		}
	}
	if mode(t, filepath.Join(dir, "uid")) != 0o400 || mode(t, filepath.Join(dir, "name")) != 0o644 {
		t.Error("downwardAPI modes wrong")
	}

	// Label change on a later sync is written.
	first := dataTarget(t, dir)
	pod.Labels["tier"] = "back"
	if _, err := m.SetUpPod(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	if got := mustRead(t, filepath.Join(dir, "labels")); got != "app=\"web\"\ntier=\"back\"" {
		t.Errorf("labels after change = %q", got)
	}
	if dataTarget(t, dir) == first {
		t.Error("..data not swapped on label change")
	}
}

// kubeAPIAccessVolume is the volume the ServiceAccount admission plugin adds
// to every pod, field for field.
func kubeAPIAccessVolume() v1.Volume {
	return v1.Volume{
		Name: "kube-api-access-x7k2p",
		VolumeSource: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{
			DefaultMode: ptr.To[int32](0o644),
			Sources: []v1.VolumeProjection{
				{ServiceAccountToken: &v1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: ptr.To[int64](3607)}},
				{ConfigMap: &v1.ConfigMapProjection{
					LocalObjectReference: v1.LocalObjectReference{Name: "kube-root-ca.crt"},
					Items:                []v1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}},
				}},
				{DownwardAPI: &v1.DownwardAPIProjection{Items: []v1.DownwardAPIVolumeFile{{
					Path:     "namespace",
					FieldRef: &v1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"},
				}}}},
			},
		}},
	}
}

func TestKubeAPIAccessProjectedVolume(t *testing.T) {
	requireRoot(t)
	kube := &fakeKube{cms: map[string]*v1.ConfigMap{"ns1/kube-root-ca.crt": {Data: map[string]string{"ca.crt": "-----BEGIN CERTIFICATE-----\n"}}}}
	m, root, _ := newTestManager(t, kube)
	pod := testPod(kubeAPIAccessVolume())
	tearDownOnCleanup(t, m, pod.UID)
	got, err := m.SetUpPod(context.Background(), pod)
	if err != nil {
		t.Fatal(err)
	}
	dir := volPath(root, pod.UID, pluginProjected, "kube-api-access-x7k2p")
	if hv := got["kube-api-access-x7k2p"]; hv.Path != dir || !hv.ReadOnly {
		t.Errorf("HostVolume %+v, want read-only %s", hv, dir)
	}
	for p, w := range map[string]string{"token": "token-1", "ca.crt": "-----BEGIN CERTIFICATE-----\n", "namespace": "ns1"} {
		if got := mustRead(t, filepath.Join(dir, p)); got != w {
			t.Errorf("%s = %q, want %q", p, got, w)
		}
		if md := mode(t, filepath.Join(dir, p)); md != 0o644 {
			t.Errorf("%s mode %v, want 0644", p, md)
		}
	}
	if mounted, _ := mountutil.IsMountPoint(dir); !mounted {
		t.Error("projected volume is not on a tmpfs")
	}
	if len(kube.tokReqs) != 1 {
		t.Fatalf("token requests: %d", len(kube.tokReqs))
	}
	req := kube.tokReqs[0]
	if kube.calls[0] != "token:ns1/sa1" {
		t.Errorf("token requested as %q", kube.calls[0])
	}
	if req.Spec.Audiences != nil || *req.Spec.ExpirationSeconds != 3607 {
		t.Errorf("token spec audiences=%v exp=%d", req.Spec.Audiences, *req.Spec.ExpirationSeconds)
	}
	if b := req.Spec.BoundObjectRef; b == nil || b.Kind != "Pod" || b.APIVersion != "v1" || b.Name != "web" || b.UID != "uid-1" {
		t.Errorf("bound object ref %+v", req.Spec.BoundObjectRef)
	}

	// Missing kube-root-ca.crt (not optional in this shape) fails the volume.
	other := testPod(kubeAPIAccessVolume())
	other.Namespace, other.UID = "empty-ns", "uid-3"
	tearDownOnCleanup(t, m, other.UID)
	if _, err := m.SetUpPod(context.Background(), other); err == nil || !strings.Contains(err.Error(), `configmap "kube-root-ca.crt" not found`) {
		t.Errorf("error = %v", err)
	}
}

func TestProjectedTokenRefresh(t *testing.T) {
	tests := []struct {
		name        string
		expSeconds  *int64
		audience    string
		step        time.Duration
		wantRefresh bool
	}{
		{name: "default 1h, just before 80%", step: 2880*time.Second - time.Second, wantRefresh: false},
		{name: "default 1h, at 80%", step: 2880 * time.Second, wantRefresh: true},
		{name: "10m, before 80% (8m)", expSeconds: ptr.To[int64](600), step: 7 * time.Minute, wantRefresh: false},
		{name: "10m, after 80%", expSeconds: ptr.To[int64](600), step: 8*time.Minute + time.Second, wantRefresh: true},
		{name: "below minimum is raised to 600s", expSeconds: ptr.To[int64](60), step: 2 * time.Minute, wantRefresh: false},
		{name: "48h token is refreshed after 24h", expSeconds: ptr.To[int64](48 * 3600), audience: "vault", step: 24*time.Hour + time.Second, wantRefresh: true},
		{name: "48h token is kept before 24h", expSeconds: ptr.To[int64](48 * 3600), audience: "vault", step: 23 * time.Hour, wantRefresh: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			kube := &fakeKube{}
			m, root, clk := newTestManager(t, kube, WithoutTmpfs())
			pod := testPod(v1.Volume{Name: "tok", VolumeSource: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{
				Sources: []v1.VolumeProjection{{ServiceAccountToken: &v1.ServiceAccountTokenProjection{
					Path: "sub/token", Audience: tt.audience, ExpirationSeconds: tt.expSeconds}}},
			}}})
			tearDownOnCleanup(t, m, pod.UID)
			ctx := context.Background()
			if _, err := m.SetUpPod(ctx, pod); err != nil {
				t.Fatal(err)
			}
			clk.Step(tt.step)
			if _, err := m.SetUpPod(ctx, pod); err != nil {
				t.Fatal(err)
			}
			wantCalls, wantToken := 1, "token-1"
			if tt.wantRefresh {
				wantCalls, wantToken = 2, "token-2"
			}
			if n := kube.count("token:"); n != wantCalls {
				t.Errorf("token requests %d, want %d", n, wantCalls)
			}
			file := filepath.Join(volPath(root, pod.UID, pluginProjected, "tok"), "sub/token")
			if got := mustRead(t, file); got != wantToken {
				t.Errorf("token file %q, want %q", got, wantToken)
			}
			if tt.audience != "" && (len(kube.tokReqs[0].Spec.Audiences) != 1 || kube.tokReqs[0].Spec.Audiences[0] != tt.audience) {
				t.Errorf("audiences %v", kube.tokReqs[0].Spec.Audiences)
			}
			if tt.expSeconds != nil && *tt.expSeconds < 600 && *kube.tokReqs[0].Spec.ExpirationSeconds != 600 {
				t.Errorf("expiration %d, want 600", *kube.tokReqs[0].Spec.ExpirationSeconds)
			}
		})
	}
}

func TestProjectedTokenRefreshFailureKeepsValidToken(t *testing.T) {
	kube := &fakeKube{}
	m, root, clk := newTestManager(t, kube, WithoutTmpfs())
	pod := testPod(v1.Volume{Name: "tok", VolumeSource: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{
		Sources: []v1.VolumeProjection{{ServiceAccountToken: &v1.ServiceAccountTokenProjection{Path: "token"}}},
	}}})
	tearDownOnCleanup(t, m, pod.UID)
	ctx := context.Background()
	if _, err := m.SetUpPod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	kube.mu.Lock()
	kube.tokenErr = errors.New("apiserver down")
	kube.mu.Unlock()
	clk.Step(50 * time.Minute) // past 80%, not expired
	if _, err := m.SetUpPod(ctx, pod); err != nil {
		t.Fatalf("refresh failure with a valid token: %v", err)
	}
	if got := mustRead(t, filepath.Join(volPath(root, pod.UID, pluginProjected, "tok"), "token")); got != "token-1" {
		t.Errorf("token %q", got)
	}
	clk.Step(11 * time.Minute) // expired
	if _, err := m.SetUpPod(ctx, pod); err == nil || !strings.Contains(err.Error(), "apiserver down") {
		t.Errorf("expired token and failing API: err = %v", err)
	}
}

func TestHostPathTypes(t *testing.T) {
	base := t.TempDir()
	if err := os.WriteFile(filepath.Join(base, "file"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(base, "dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(base, "s.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()

	typ := func(x v1.HostPathType) *v1.HostPathType { return &x }
	tests := []struct {
		name    string
		path    string
		typ     *v1.HostPathType
		wantErr string
		check   func(t *testing.T, p string)
	}{
		{name: "unset type, missing path is fine", path: filepath.Join(base, "nothing")},
		{name: "empty type string", path: filepath.Join(base, "nothing"), typ: typ("")},
		{name: "DirectoryOrCreate creates 0755", path: filepath.Join(base, "made/deep"), typ: typ(v1.HostPathDirectoryOrCreate),
			check: func(t *testing.T, p string) {
				if fi, err := os.Stat(p); err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o755 {
					t.Errorf("created dir: %v %v", fi, err)
				}
			}},
		{name: "DirectoryOrCreate on a file", path: filepath.Join(base, "file"), typ: typ(v1.HostPathDirectoryOrCreate), wantErr: "is not a directory"},
		{name: "Directory exists", path: filepath.Join(base, "dir"), typ: typ(v1.HostPathDirectory)},
		{name: "Directory missing", path: filepath.Join(base, "missing"), typ: typ(v1.HostPathDirectory), wantErr: "is not a directory (it does not exist)"},
		{name: "FileOrCreate creates an empty 0644 file", path: filepath.Join(base, "newfile"), typ: typ(v1.HostPathFileOrCreate),
			check: func(t *testing.T, p string) {
				if fi, err := os.Stat(p); err != nil || !fi.Mode().IsRegular() || fi.Size() != 0 || fi.Mode().Perm() != 0o644 {
					t.Errorf("created file: %v %v", fi, err)
				}
			}},
		{name: "FileOrCreate does not create parents", path: filepath.Join(base, "noparent/f"), typ: typ(v1.HostPathFileOrCreate), wantErr: "creating file"},
		{name: "File on a directory", path: filepath.Join(base, "dir"), typ: typ(v1.HostPathFile), wantErr: "is not a file"},
		{name: "File exists", path: filepath.Join(base, "file"), typ: typ(v1.HostPathFile)},
		{name: "Socket", path: sock, typ: typ(v1.HostPathSocket)},
		{name: "Socket on a file", path: filepath.Join(base, "file"), typ: typ(v1.HostPathSocket), wantErr: "is not a socket file"},
		{name: "CharDevice /dev/null", path: "/dev/null", typ: typ(v1.HostPathCharDev)},
		{name: "BlockDevice on a char device", path: "/dev/null", typ: typ(v1.HostPathBlockDev), wantErr: "is not a block device"},
		{name: "CharDevice on a dir", path: filepath.Join(base, "dir"), typ: typ(v1.HostPathCharDev), wantErr: "is not a character device"},
		{name: "unknown type", path: base, typ: typ("Weird"), wantErr: "unknown type"},
	}
	m, _, _ := newTestManager(t, nil)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := testPod(v1.Volume{Name: "hp", VolumeSource: v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: tt.path, Type: tt.typ}}})
			got, err := m.SetUpPod(context.Background(), pod)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), `volume "hp"`) ||
					!strings.Contains(err.Error(), tt.path) {
					t.Fatalf("error = %v, want one naming the volume, %s and %q", err, tt.path, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if hv := got["hp"]; hv.Path != tt.path || hv.ReadOnly {
				t.Errorf("HostVolume %+v", hv)
			}
			if tt.check != nil {
				tt.check(t, tt.path)
			}
		})
	}
}

func TestEmptyDirAndTearDown(t *testing.T) {
	requireRoot(t)
	kube := &fakeKube{secrets: map[string]*v1.Secret{"ns1/s": {Data: map[string][]byte{"k": []byte("v")}}}}
	m, root, _ := newTestManager(t, kube)
	pod := testPod(
		v1.Volume{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
		v1.Volume{Name: "shm", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{Medium: v1.StorageMediumMemory, SizeLimit: ptr.To(resource.MustParse("16Mi"))}}},
		v1.Volume{Name: "mem", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{Medium: v1.StorageMediumMemory}}},
		v1.Volume{Name: "sec", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: "s"}}},
	)
	tearDownOnCleanup(t, m, pod.UID)
	ctx := context.Background()
	if m.PodVolumesExist(pod.UID) {
		t.Fatal("volumes exist before setup")
	}
	got, err := m.SetUpPod(ctx, pod)
	if err != nil {
		t.Fatal(err)
	}
	scratch := volPath(root, pod.UID, pluginEmptyDir, "scratch")
	if hv := got["scratch"]; hv.Path != scratch || hv.ReadOnly {
		t.Errorf("scratch %+v", hv)
	}
	if md := mode(t, scratch); md != 0o777 {
		t.Errorf("emptyDir mode %v, want 0777", md)
	}
	if mounted, _ := mountutil.IsMountPoint(scratch); mounted {
		t.Error("disk emptyDir is a mount")
	}
	sizes := map[string]int64{"shm": 16 << 20, "mem": 256 << 20} // sizeLimit; else the pod's memory limit
	for name, want := range sizes {
		p := volPath(root, pod.UID, pluginEmptyDir, name)
		var st unix.Statfs_t
		if err := unix.Statfs(p, &st); err != nil || st.Type != unix.TMPFS_MAGIC {
			t.Fatalf("%s: not tmpfs (%x, %v)", name, st.Type, err)
		}
		if size := int64(st.Blocks) * st.Bsize; size != want {
			t.Errorf("%s tmpfs size %d, want %d", name, size, want)
		}
	}
	if err := os.WriteFile(filepath.Join(volPath(root, pod.UID, pluginEmptyDir, "shm"), "data"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := m.SetUpPod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if mps, _ := mountutil.PointsUnder(m.podVolumesDir(pod.UID)); len(mps) != 3 {
		t.Errorf("after repeat setup: mounts %v, want 3", mps)
	}
	if !m.PodVolumesExist(pod.UID) {
		t.Error("PodVolumesExist false after setup")
	}
	uids, err := m.PodsWithVolumes()
	if err != nil || len(uids) != 1 || uids[0] != pod.UID {
		t.Errorf("PodsWithVolumes = %v, %v", uids, err)
	}

	for i := 0; i < 2; i++ {
		if err := m.TearDownPod(ctx, pod.UID); err != nil {
			t.Fatalf("teardown %d: %v", i, err)
		}
	}
	if mps, _ := mountutil.PointsUnder(filepath.Join(root, "pods")); len(mps) != 0 {
		t.Errorf("mounts left: %v", mps)
	}
	if _, err := os.Stat(m.podVolumesDir(pod.UID)); !os.IsNotExist(err) {
		t.Errorf("volumes dir left: %v", err)
	}
	if m.PodVolumesExist(pod.UID) {
		t.Error("PodVolumesExist true after teardown")
	}

	// Setting up again after teardown works from scratch (no stale state).
	if _, err := m.SetUpPod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if mustRead(t, filepath.Join(volPath(root, pod.UID, pluginSecret, "sec"), "k")) != "v" {
		t.Error("secret not rewritten after teardown")
	}
}

func TestTearDownWithoutTmpfsAndUnknownPod(t *testing.T) {
	m, root, _ := newTestManager(t, &fakeKube{cms: map[string]*v1.ConfigMap{"ns1/c": {Data: map[string]string{"a": "b"}}}}, WithoutTmpfs())
	ctx := context.Background()
	if err := m.TearDownPod(ctx, "never-seen"); err != nil {
		t.Fatalf("teardown of an unknown pod: %v", err)
	}
	pod := testPod(
		v1.Volume{Name: "c", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: "c"}}}},
		v1.Volume{Name: "e", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
	)
	if _, err := m.SetUpPod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if err := m.TearDownPod(ctx, pod.UID); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "pods", string(pod.UID), "volumes")); !os.IsNotExist(err) {
		t.Errorf("volumes dir left: %v", err)
	}
	mem := testPod(v1.Volume{Name: "m", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{Medium: v1.StorageMediumMemory}}})
	if _, err := m.SetUpPod(ctx, mem); err == nil {
		t.Error("medium Memory accepted without tmpfs")
	}
}

func TestUnsupportedAndStandalone(t *testing.T) {
	m, _, _ := newTestManager(t, nil)
	ctx := context.Background()
	pod := testPod(
		v1.Volume{Name: "pvc", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "x"}}},
		v1.Volume{Name: "cfg", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: "x"}}}},
		v1.Volume{Name: "opt", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: "x"}, Optional: ptr.To(true)}}},
		v1.Volume{Name: "e", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
		v1.Volume{Name: "img", VolumeSource: v1.VolumeSource{Image: &v1.ImageVolumeSource{Reference: "reg.example.com/data:1", PullPolicy: v1.PullNever}}},
	)
	pod.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "pvc", MountPath: "/data"}}
	tearDownOnCleanup(t, m, pod.UID)
	got, err := m.SetUpPod(ctx, pod)
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{`failed to process volumes=[pvc]: error processing PVC ns1/x: failed to fetch PVC from API server: no API server connection`, `volume "cfg" : cannot get configmap ns1/x: no API server connection`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if _, ok := got["e"]; !ok {
		t.Error("the emptyDir was not set up alongside the failing volumes")
	}
	if _, ok := got["opt"]; !ok {
		t.Error("optional configMap in standalone mode should be an empty volume")
	}
	// An image volume holds nothing on the host: podruntime pulls it and the
	// runtime mounts it.
	if img := got["img"]; img.Image == nil || img.Image.Reference != "reg.example.com/data:1" || img.Path != "" || !img.ReadOnly {
		t.Errorf("image volume set up as %+v", img)
	}

	bad := testPod(v1.Volume{Name: "../x", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}})
	if _, err := m.SetUpPod(ctx, bad); err == nil {
		t.Error("volume name with a slash accepted")
	}
	noUID := testPod()
	noUID.UID = ""
	if _, err := m.SetUpPod(ctx, noUID); err == nil {
		t.Error("pod without UID accepted")
	}
}

func TestKubeGetterFromClientset(t *testing.T) {
	cs := fake.NewClientset(
		&v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns1", Name: "c"}, Data: map[string]string{"a": "b"}},
		&v1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns1", Name: "s"}, Data: map[string][]byte{"k": []byte("v")}},
	)
	g := KubeGetterFromClientset(cs)
	ctx := context.Background()
	if cm, err := g.GetConfigMap(ctx, "ns1", "c"); err != nil || cm.Data["a"] != "b" {
		t.Errorf("configmap: %v %v", cm, err)
	}
	if _, err := g.GetConfigMap(ctx, "ns1", "missing"); !apierrors.IsNotFound(err) {
		t.Errorf("missing configmap error %v is not NotFound", err)
	}
	if s, err := g.GetSecret(ctx, "ns1", "s"); err != nil || string(s.Data["k"]) != "v" {
		t.Errorf("secret: %v %v", s, err)
	}
	var seen string
	cs.PrependReactor("create", "serviceaccounts", func(a k8stesting.Action) (bool, runtime.Object, error) {
		ca := a.(k8stesting.CreateActionImpl)
		seen = ca.GetNamespace() + "/" + ca.GetSubresource() + "/" + ca.Name
		return true, &authenticationv1.TokenRequest{Status: authenticationv1.TokenRequestStatus{Token: "tok"}}, nil
	})
	tr, err := g.CreateToken(ctx, "ns1", "sa", &authenticationv1.TokenRequest{})
	if err != nil || tr.Status.Token != "tok" || seen != "ns1/token/sa" {
		t.Errorf("create token: %v %v, action %q", tr, err, seen)
	}
}

// objectsOnly serves one configMap and counts reads.
type objectsOnly struct{ reads int }

func (o *objectsOnly) GetConfigMap(_ context.Context, ns, name string) (*v1.ConfigMap, error) {
	o.reads++
	return &v1.ConfigMap{Data: map[string]string{"from": "objects"}}, nil
}

func (o *objectsOnly) GetSecret(_ context.Context, ns, name string) (*v1.Secret, error) {
	o.reads++
	return nil, apierrors.NewNotFound(v1.Resource("secret"), name)
}

// Objects come from the object source, tokens from the clientset.
func TestKubeGetterWithObjects(t *testing.T) {
	cs := fake.NewClientset(&v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns1", Name: "c"}, Data: map[string]string{"from": "clientset"}})
	cs.PrependReactor("create", "serviceaccounts", func(a k8stesting.Action) (bool, runtime.Object, error) {
		return true, &authenticationv1.TokenRequest{Status: authenticationv1.TokenRequestStatus{Token: "tok"}}, nil
	})
	objs := &objectsOnly{}
	g := KubeGetterWithObjects(objs, cs)
	ctx := context.Background()
	if cm, err := g.GetConfigMap(ctx, "ns1", "c"); err != nil || cm.Data["from"] != "objects" {
		t.Errorf("configmap: %v %v; want the object source's", cm, err)
	}
	if _, err := g.GetSecret(ctx, "ns1", "s"); !apierrors.IsNotFound(err) || objs.reads != 2 {
		t.Errorf("secret: %v, %d reads of the object source; want NotFound from it", err, objs.reads)
	}
	if tr, err := g.CreateToken(ctx, "ns1", "sa", &authenticationv1.TokenRequest{}); err != nil || tr.Status.Token != "tok" {
		t.Errorf("create token: %v %v", tr, err)
	}
}

func TestFSGroupAndFsUser(t *testing.T) {
	requireRoot(t)
	kube := &fakeKube{cms: map[string]*v1.ConfigMap{"ns1/c": {Data: map[string]string{"key": "v"}}}}
	m, root, clk := newTestManager(t, kube)
	pod := testPod(
		v1.Volume{Name: "c", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{
			LocalObjectReference: v1.LocalObjectReference{Name: "c"}, DefaultMode: ptr.To[int32](0o400)}}},
		v1.Volume{Name: "e", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
		v1.Volume{Name: "tok", VolumeSource: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{
			DefaultMode: ptr.To[int32](0o644),
			Sources:     []v1.VolumeProjection{{ServiceAccountToken: &v1.ServiceAccountTokenProjection{Path: "token"}}},
		}}},
	)
	pod.Spec.SecurityContext = &v1.PodSecurityContext{FSGroup: ptr.To[int64](2000), RunAsUser: ptr.To[int64](1000)}
	tearDownOnCleanup(t, m, pod.UID)
	ctx := context.Background()
	if _, err := m.SetUpPod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	owner := func(p string) (uint32, uint32, os.FileMode) {
		t.Helper()
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		return st.Uid, st.Gid, fi.Mode() & (os.ModePerm | os.ModeSetgid)
	}
	tests := []struct {
		path     string
		uid, gid uint32
		mode     os.FileMode
	}{
		{filepath.Join(volPath(root, pod.UID, pluginConfigMap, "c"), "key"), 0, 2000, 0o440},
		{volPath(root, pod.UID, pluginEmptyDir, "e"), 0, 2000, os.ModeSetgid | 0o777},
		{filepath.Join(volPath(root, pod.UID, pluginProjected, "tok"), "token"), 1000, 2000, 0o640},
	}
	for _, tt := range tests {
		uid, gid, md := owner(tt.path)
		if uid != tt.uid || gid != tt.gid || md != tt.mode {
			t.Errorf("%s: uid %d gid %d mode %v, want %d %d %v", tt.path, uid, gid, md, tt.uid, tt.gid, tt.mode)
		}
	}
	// The links themselves belong to the fsGroup too (upstream's Lchown), and
	// their targets keep their modes.
	for _, link := range []string{"key", dataDirName} {
		p := filepath.Join(volPath(root, pod.UID, pluginConfigMap, "c"), link)
		fi, err := os.Lstat(p)
		if err != nil {
			t.Fatal(err)
		}
		if gid := fi.Sys().(*syscall.Stat_t).Gid; fi.Mode()&os.ModeSymlink == 0 || gid != 2000 {
			t.Errorf("%s: mode %v gid %d, want a link of group 2000", p, fi.Mode(), gid)
		}
	}

	// A restarted manager (no memory of what it wrote) recognises the
	// unchanged configMap on disk and does not rewrite it.
	cmDir := volPath(root, pod.UID, pluginConfigMap, "c")
	before := dataTarget(t, cmDir)
	m2 := NewManager(root, kube, clk)
	clk.Step(time.Second)
	if _, err := m2.SetUpPod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if after := dataTarget(t, cmDir); after != before {
		t.Errorf("restarted manager rewrote unchanged data: %s -> %s", before, after)
	}
	if mps, _ := mountutil.PointsUnder(m.podVolumesDir(pod.UID)); len(mps) != 1 {
		t.Errorf("mounts after restart %v, want the one projected tmpfs", mps)
	}
}

func TestConcurrentPods(t *testing.T) {
	kube := &fakeKube{cms: map[string]*v1.ConfigMap{"ns1/c": {Data: map[string]string{"k": "v"}}}}
	m, root, _ := newTestManager(t, kube, WithoutTmpfs())
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := 0; i < 8; i++ {
		pod := testPod(v1.Volume{Name: "c", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: "c"}}}})
		pod.UID = types.UID(fmt.Sprintf("uid-%d", i))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 3; j++ {
				if _, err := m.SetUpPod(context.Background(), pod); err != nil {
					errs <- err
					return
				}
			}
			errs <- m.TearDownPod(context.Background(), pod.UID)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if uids, _ := m.PodsWithVolumes(); len(uids) != 0 {
		t.Errorf("pods with volumes left: %v (root %s)", uids, root)
	}
}

// A refresh that fails (the configMap was deleted) leaves the earlier content
// and still returns the volume, as upstream's failed remounts leave a running
// pod's volume; so does a new manager (nodelet restarted) finding it on disk.
// A volume never filled is missing from the map.
func TestRefreshFailureKeepsContent(t *testing.T) {
	kube := &fakeKube{cms: map[string]*v1.ConfigMap{"ns1/cfg": {Data: map[string]string{"k": "v1"}}}}
	m, root, _ := newTestManager(t, kube, WithoutTmpfs())
	pod := testPod(
		v1.Volume{Name: "c", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{
			LocalObjectReference: v1.LocalObjectReference{Name: "cfg"}}}},
		v1.Volume{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
	)
	tearDownOnCleanup(t, m, pod.UID)
	ctx := context.Background()
	if _, err := m.SetUpPod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	dir := volPath(root, pod.UID, pluginConfigMap, "c")
	kube.mu.Lock()
	delete(kube.cms, "ns1/cfg")
	kube.mu.Unlock()

	for _, mgr := range []*Manager{m, NewManager(root, kube, clocktesting.NewFakeClock(t0), WithoutTmpfs())} {
		got, err := mgr.SetUpPod(ctx, pod)
		if err == nil || !strings.Contains(err.Error(), `MountVolume.SetUp failed for volume "c" : configmap "cfg" not found`) {
			t.Fatalf("refresh error = %v; want upstream's FailedMount wording", err)
		}
		if !OnlyKeptContent(err) {
			t.Errorf("OnlyKeptContent(%v) = false; the volume kept its content", err)
		}
		if got["c"].Path != dir || !got["c"].ReadOnly || got["scratch"].Path == "" {
			t.Errorf("volumes = %+v; want c at %s (kept) and scratch", got, dir)
		}
		if v := mustRead(t, filepath.Join(dir, "k")); v != "v1" {
			t.Errorf("k = %q after a failed refresh; want the earlier v1", v)
		}
	}

	other := testPod(v1.Volume{Name: "c", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{
		LocalObjectReference: v1.LocalObjectReference{Name: "cfg"}}}})
	other.UID = "uid-2"
	tearDownOnCleanup(t, m, other.UID)
	got, err := m.SetUpPod(ctx, other)
	if err == nil || OnlyKeptContent(err) {
		t.Fatalf("first set-up of a missing configMap: err %v, OnlyKeptContent true; want a blocking error", err)
	}
	if _, ok := got["c"]; ok {
		t.Errorf("a volume never filled is in the map: %+v", got)
	}
}

// An optional configMap: empty while missing, its keys once created, a removed
// key's file gone, and empty again once deleted; each on the next set-up.
func TestOptionalConfigMapFollowsTheObject(t *testing.T) {
	kube := &fakeKube{cms: map[string]*v1.ConfigMap{}}
	m, root, _ := newTestManager(t, kube, WithoutTmpfs())
	pod := testPod(v1.Volume{Name: "c", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{
		LocalObjectReference: v1.LocalObjectReference{Name: "later"}, Optional: ptr.To(true)}}})
	tearDownOnCleanup(t, m, pod.UID)
	ctx := context.Background()
	dir := volPath(root, pod.UID, pluginConfigMap, "c")
	files := func() []string {
		t.Helper()
		if _, err := m.SetUpPod(ctx, pod); err != nil {
			t.Fatal(err)
		}
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range entries {
			if !strings.HasPrefix(e.Name(), "..") {
				out = append(out, e.Name()+"="+mustRead(t, filepath.Join(dir, e.Name())))
			}
		}
		return out
	}
	set := func(cm *v1.ConfigMap) {
		kube.mu.Lock()
		defer kube.mu.Unlock()
		if cm == nil {
			delete(kube.cms, "ns1/later")
			return
		}
		kube.cms["ns1/later"] = cm
	}
	steps := []struct {
		name string
		cm   *v1.ConfigMap
		want string
	}{
		{"missing", nil, "[]"},
		{"created", &v1.ConfigMap{Data: map[string]string{"a": "1", "b": "2"}}, "[a=1 b=2]"},
		{"key removed, one changed", &v1.ConfigMap{Data: map[string]string{"a": "3"}}, "[a=3]"},
		{"deleted", nil, "[]"},
	}
	for _, s := range steps {
		set(s.cm)
		if got := fmt.Sprint(files()); got != s.want {
			t.Errorf("%s: files %s, want %s", s.name, got, s.want)
		}
	}
}

// Projected: a secret's change and the pod's annotation change both reach the
// volume on the next set-up; an unchanged one rewrites nothing.
func TestProjectedVolumeRefresh(t *testing.T) {
	kube := &fakeKube{secrets: map[string]*v1.Secret{"ns1/s": {Data: map[string][]byte{"pw": []byte("one")}}}}
	m, root, _ := newTestManager(t, kube, WithoutTmpfs())
	pod := testPod(v1.Volume{Name: "p", VolumeSource: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{Sources: []v1.VolumeProjection{
		{Secret: &v1.SecretProjection{LocalObjectReference: v1.LocalObjectReference{Name: "s"}}},
		{DownwardAPI: &v1.DownwardAPIProjection{Items: []v1.DownwardAPIVolumeFile{
			{Path: "annotations", FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.annotations"}}}}},
	}}}})
	pod.Annotations = map[string]string{"build": "1"}
	tearDownOnCleanup(t, m, pod.UID)
	ctx := context.Background()
	dir := volPath(root, pod.UID, pluginProjected, "p")
	setUp := func() {
		t.Helper()
		if _, err := m.SetUpPod(ctx, pod); err != nil {
			t.Fatal(err)
		}
	}
	setUp()
	first := dataTarget(t, dir)
	setUp()
	if dataTarget(t, dir) != first {
		t.Fatal("an unchanged projected volume was rewritten")
	}
	kube.mu.Lock()
	kube.secrets["ns1/s"] = &v1.Secret{Data: map[string][]byte{"pw": []byte("two")}}
	kube.mu.Unlock()
	setUp()
	if got := mustRead(t, filepath.Join(dir, "pw")); got != "two" {
		t.Errorf("pw = %q after the secret changed; want two", got)
	}
	pod.Annotations = map[string]string{"build": "2"}
	setUp()
	if got := mustRead(t, filepath.Join(dir, "annotations")); got != `build="2"` {
		t.Errorf("annotations = %q after the pod's changed; want build=\"2\"", got)
	}
}

func TestOnlyKeptContent(t *testing.T) {
	kept := &SetUpError{Volume: "a", Err: errors.New("x"), KeptContent: true}
	lost := &SetUpError{Volume: "b", Err: errors.New("y")}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"one kept", errors.Join(kept), true},
		{"two kept", errors.Join(kept, kept), true},
		{"kept and lost", errors.Join(kept, lost), false},
		{"lost", errors.Join(lost), false},
		{"bare kept", kept, true},
		{"other error", errors.New("z"), false},
		{"wrapped kept", fmt.Errorf("setting up: %w", kept), true},
	} {
		if got := OnlyKeptContent(tc.err); got != tc.want {
			t.Errorf("%s: OnlyKeptContent = %v, want %v", tc.name, got, tc.want)
		}
	}
}
