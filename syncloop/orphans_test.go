package syncloop

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"golang.org/x/sys/unix"

	"github.com/nodelet/nodelet/cri"
	"github.com/nodelet/nodelet/internal/mountutil"
	"github.com/nodelet/nodelet/internal/testsupport/eventually"
	"github.com/nodelet/nodelet/internal/testsupport/fakecri"
	"github.com/nodelet/nodelet/pleg"
	"github.com/nodelet/nodelet/volumes"
)

// emptyPLEG lists no pods: every pod directory is an orphan.
type emptyPLEG struct{}

func (emptyPLEG) Watch() <-chan *pleg.Event  { return nil }
func (emptyPLEG) Pods() []*pleg.PodStatus    { return nil }
func (emptyPLEG) Relist(ctx context.Context) {}
func (emptyPLEG) RequestReinspect(types.UID) {}
func (emptyPLEG) Listed() bool               { return true }

// TestCleanupOrphanedPodDirsNeverDeletesThroughMounts is a node that switched
// from the upstream kubelet: a dead pod's directory still holds a subPath bind
// mount in volume-subpaths and a CSI-style bind mount under plugins. Before
// the fix, os.RemoveAll of the pod directory deleted the data behind both.
func TestCleanupOrphanedPodDirsNeverDeletesThroughMounts(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to bind-mount in a temp dir")
	}
	root := t.TempDir()
	t.Cleanup(func() { _, _ = mountutil.UnmountAllUnder(root) })
	subpathData, csiData := t.TempDir(), t.TempDir()
	for _, d := range []string{subpathData, csiData} {
		if err := os.WriteFile(filepath.Join(d, "data"), []byte("keep me"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	pods := filepath.Join(root, "pods")
	mounted, plain := filepath.Join(pods, "dead-1"), filepath.Join(pods, "dead-2")
	subpath := filepath.Join(mounted, "volume-subpaths", "data", "app", "0")
	csi := filepath.Join(mounted, "plugins", "kubernetes.io~csi", "pv", "mount")
	for _, d := range []string{subpath, csi, filepath.Join(mounted, "containers", "app"), filepath.Join(plain, "containers", "app")} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			t.Fatal(err)
		}
	}
	for mp, src := range map[string]string{subpath: subpathData, csi: csiData} {
		if err := unix.Mount(src, mp, "", unix.MS_BIND, ""); err != nil {
			t.Fatal(err)
		}
	}

	vols := volumes.NewManager(root, nil, clocktesting.NewFakeClock(time.Unix(0, 0)))
	l := New(Config{RootDir: root}, Deps{PLEG: emptyPLEG{}, Volumes: vols})
	l.cleanupOrphanedPodDirs(context.Background(), map[types.UID]bool{}, true)

	for _, d := range []string{subpathData, csiData} {
		if got, err := os.ReadFile(filepath.Join(d, "data")); err != nil || string(got) != "keep me" {
			t.Errorf("data behind a mount in the pod directory: %q, %v", got, err)
		}
	}
	if _, err := os.Lstat(plain); !os.IsNotExist(err) {
		t.Errorf("orphan without mounts not removed: %v", err)
	}
	// nodelet's own kind of mount (volume-subpaths) is undone; the foreign one stays.
	if _, err := os.Lstat(filepath.Join(mounted, "volume-subpaths")); !os.IsNotExist(err) {
		t.Errorf("volume-subpaths left: %v", err)
	}
	if m, _ := mountutil.IsMountPoint(csi); !m {
		t.Error("CSI mount point removed or unmounted")
	}
	if _, err := os.Lstat(filepath.Join(mounted, "containers")); !os.IsNotExist(err) {
		t.Errorf("unmounted parts of the kept pod directory left: %v", err)
	}
}

func TestOrphanKeptError(t *testing.T) {
	dir := "/var/lib/kubelet/pods/u1"
	for _, tt := range []struct {
		kept []string
		want string
	}{
		{[]string{dir + "/plugins/kubernetes.io~csi/pv/mount", dir + "/volume-subpaths/v/c/0"}, `orphaned pod "u1" found, but volume subpaths are still present on disk`},
		{[]string{dir + "/volumes/kubernetes.io~csi/pv/mount"}, `orphaned pod "u1" found, but volume paths are still present on disk`},
		{[]string{dir + "/plugins/x"}, `orphaned pod "u1" found, but mount points are still present on disk`},
	} {
		if got := orphanKeptError(dir, "u1", tt.kept).Error(); got != tt.want {
			t.Errorf("%v: %q, want %q", tt.kept, got, tt.want)
		}
	}
}

func TestMayCleanOrphan(t *testing.T) {
	for _, tt := range []struct {
		name string
		f    orphanFacts
		want bool
	}{
		{"orphan after a listing", orphanFacts{sourcesReady: true, listed: true}, true},
		{"sources not ready", orphanFacts{listed: true}, false},
		{"runtime never listed", orphanFacts{sourcesReady: true}, false},
		{"never listed, not in the (empty) listing", orphanFacts{sourcesReady: true, inListing: false}, false},
		{"wanted", orphanFacts{sourcesReady: true, listed: true, wanted: true}, false},
		{"in the listing", orphanFacts{sourcesReady: true, listed: true, inListing: true}, false},
		{"in the listing, sources not ready", orphanFacts{listed: true, inListing: true}, false},
	} {
		if got, why := mayCleanOrphan(tt.f); got != tt.want || (!got && why == "") {
			t.Errorf("%s: mayCleanOrphan(%+v) = %v, %q; want %v with a reason when false", tt.name, tt.f, got, why, tt.want)
		}
	}
}

// TestOrphanCleanupWaitsForFirstListing is a nodelet starting while the
// runtime is slow: a pod deleted while nodelet was down still runs, and
// another left only its directory. Before the fix the first housekeeping,
// with no successful listing yet, took both for orphans and tore down the
// running pod's volumes under its containers.
func TestOrphanCleanupWaitsForFirstListing(t *testing.T) {
	ctx := context.Background()
	fake := fakecri.New(t)
	fake.AddImage("busybox:1")
	client, err := cri.New(ctx, fake.Endpoint(), "", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close(context.Background()) })

	// "gone-running" runs in the runtime; "gone-dead" has only its directory.
	sbCfg := &runtimeapi.PodSandboxConfig{
		Metadata: &runtimeapi.PodSandboxMetadata{Name: "web", Namespace: "default", Uid: "gone-running"},
		Labels:   map[string]string{cri.LabelPodUID: "gone-running", cri.LabelPodName: "web", cri.LabelPodNamespace: "default"},
	}
	sb, err := client.RunPodSandbox(ctx, sbCfg, "")
	if err != nil {
		t.Fatal(err)
	}
	cid, err := client.CreateContainer(ctx, sb, &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "app"},
		Image:    &runtimeapi.ImageSpec{Image: "busybox:1"},
		Labels:   map[string]string{cri.LabelPodUID: "gone-running", cri.LabelContainerName: "app"},
	}, sbCfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := client.StartContainer(ctx, cid); err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	runningDir, deadDir := filepath.Join(root, "pods", "gone-running"), filepath.Join(root, "pods", "gone-dead")
	for _, d := range []string{filepath.Join(runningDir, "volumes", "kubernetes.io~empty-dir", "data"), filepath.Join(deadDir, "containers", "app")} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			t.Fatal(err)
		}
	}

	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	g := pleg.NewGeneric(client, pleg.NewCache(clk), 0, 0, clk)
	vols := &fakeVolumes{tornDown: map[types.UID]bool{}}
	l := New(Config{RootDir: root}, Deps{PLEG: g, Volumes: vols})
	nothingCleaned := func(when string) {
		t.Helper()
		l.cleanupOrphanedPodDirs(ctx, map[types.UID]bool{}, true)
		vols.mu.Lock()
		defer vols.mu.Unlock()
		if len(vols.tornDown) != 0 {
			t.Errorf("%s: volumes torn down: %v", when, vols.tornDown)
		}
		for _, d := range []string{runningDir, deadDir} {
			if _, err := os.Stat(d); err != nil {
				t.Errorf("%s: %s: %v", when, d, err)
			}
		}
	}

	// The first listing fails.
	fake.InjectError("ListPodSandbox", status.Error(codes.DeadlineExceeded, "runtime slow at start"))
	g.Relist(ctx)
	nothingCleaned("after a failed first listing")

	// The next one hangs; housekeeping runs meanwhile; then it times out.
	fake.SetDelay("ListPodSandbox", time.Hour)
	before := countOf(fake, "ListPodSandbox")
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { g.Relist(rctx); close(done) }()
	eventually.True(t, "the slow listing to start", func() bool { return countOf(fake, "ListPodSandbox") > before })
	nothingCleaned("during a slow first listing")
	cancel()
	<-done
	nothingCleaned("after a timed-out first listing")
	fake.SetDelay("ListPodSandbox", 0)

	// A listing succeeds: the dead pod's directory goes, the running one's stays.
	g.Relist(ctx)
	if !g.Listed() {
		t.Fatalf("Listed() false after a good relist: %v", g.RelistError())
	}
	l.cleanupOrphanedPodDirs(ctx, map[types.UID]bool{}, true)
	if _, err := os.Stat(deadDir); !os.IsNotExist(err) {
		t.Errorf("orphan with nothing in the runtime not removed: %v", err)
	}
	if _, err := os.Stat(runningDir); err != nil {
		t.Errorf("directory of a pod in the listing removed: %v", err)
	}
	// A later failing listing keeps what the last good one showed.
	fake.InjectError("ListContainers", status.Error(codes.Unavailable, "runtime down"))
	g.Relist(ctx)
	l.cleanupOrphanedPodDirs(ctx, map[types.UID]bool{}, true)
	vols.mu.Lock()
	defer vols.mu.Unlock()
	if !vols.tornDown["gone-dead"] || vols.tornDown["gone-running"] {
		t.Errorf("torn down: %v, want gone-dead only", vols.tornDown)
	}
	if _, err := os.Stat(runningDir); err != nil {
		t.Errorf("directory of a pod in the listing removed: %v", err)
	}
}
