package userns

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/internal/testsupport/eventually"
	"github.com/nodelet/nodelet/internal/testsupport/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.VerifyTestMain(m) }

func usernsPod(uid string, hostUsers *bool) *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p-" + uid, Namespace: "ns", UID: types.UID(uid)}, Spec: v1.PodSpec{HostUsers: hostUsers}}
}

func handlers(hs ...*runtimeapi.RuntimeHandler) Handlers {
	return func() ([]*runtimeapi.RuntimeHandler, bool) { return hs, true }
}

func handler(name string, userns bool) *runtimeapi.RuntimeHandler {
	return &runtimeapi.RuntimeHandler{Name: name, Features: &runtimeapi.RuntimeHandlerFeatures{UserNamespaces: userns}}
}

func openManager(t *testing.T, podsDir string, h Handlers) *Manager {
	t.Helper()
	m, err := Open(context.Background(), Options{
		PodsDir: podsDir, First: UnitLength, Length: 8 * UnitLength, IDsPerPod: UnitLength, MaxPods: 8,
		Handlers: h, Intn: func(int) int { return 0 },
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestGetOrCreateMapsPodsAndKeepsTheirRange(t *testing.T) {
	dir := t.TempDir()
	m := openManager(t, dir, handlers(handler("", true)))

	for _, hu := range []*bool{nil, ptr.To(true)} {
		ns, err := m.GetOrCreateUserNamespaceMappings(usernsPod("host", hu), "")
		if err != nil || ns.GetMode() != runtimeapi.NamespaceMode_NODE || len(ns.GetUids()) != 0 {
			t.Fatalf("hostUsers %v: %v, %v; want mode NODE", hu, ns, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "host", MappingsFile)); !os.IsNotExist(err) {
		t.Errorf("a pod in the host user namespace got a mappings file: %v", err)
	}

	a, err := m.GetOrCreateUserNamespaceMappings(usernsPod("a", ptr.To(false)), "")
	if err != nil {
		t.Fatal(err)
	}
	want := &runtimeapi.UserNamespace{
		Mode: runtimeapi.NamespaceMode_POD,
		Uids: []*runtimeapi.IDMapping{{HostId: UnitLength, ContainerId: 0, Length: UnitLength}},
		Gids: []*runtimeapi.IDMapping{{HostId: UnitLength, ContainerId: 0, Length: UnitLength}},
	}
	if a.String() != want.String() {
		t.Fatalf("pod a: %v, want %v", a, want)
	}
	b, err := m.GetOrCreateUserNamespaceMappings(usernsPod("b", ptr.To(false)), "")
	if err != nil {
		t.Fatal(err)
	}
	if got := b.GetUids()[0].GetHostId(); got != 2*UnitLength {
		t.Errorf("pod b starts at %d, want the next free range %d", got, 2*UnitLength)
	}
	// The same pod again (each container start asks): the same range.
	again, err := m.GetOrCreateUserNamespaceMappings(usernsPod("a", ptr.To(false)), "")
	if err != nil || again.String() != a.String() {
		t.Fatalf("pod a again: %v, %v; want %v", again, err, a)
	}
	data, err := os.ReadFile(filepath.Join(dir, "a", MappingsFile))
	if err != nil {
		t.Fatal(err)
	}
	if got := string(data); got != `{"uidMappings":[{"hostId":65536,"containerId":0,"length":65536}],"gidMappings":[{"hostId":65536,"containerId":0,"length":65536}]}` {
		t.Errorf("file = %s", got)
	}

	// A restart reads the ranges back: pod a keeps its range, a new pod gets
	// neither a's nor b's.
	m2 := openManager(t, dir, handlers(handler("", true)))
	a2, err := m2.GetOrCreateUserNamespaceMappings(usernsPod("a", ptr.To(false)), "")
	if err != nil || a2.String() != a.String() {
		t.Fatalf("pod a after restart: %v, %v; want %v", a2, err, a)
	}
	c, err := m2.GetOrCreateUserNamespaceMappings(usernsPod("c", ptr.To(false)), "")
	if err != nil {
		t.Fatal(err)
	}
	if got := c.GetUids()[0].GetHostId(); got != 3*UnitLength {
		t.Errorf("pod c after restart starts at %d, want %d (a and b keep theirs)", got, 3*UnitLength)
	}

	// Released: the file goes and the range is free again.
	m2.Release(context.Background(), "a")
	if _, err := os.Stat(filepath.Join(dir, "a", MappingsFile)); !os.IsNotExist(err) {
		t.Errorf("file of a released pod: %v", err)
	}
	d, err := m2.GetOrCreateUserNamespaceMappings(usernsPod("d", ptr.To(false)), "")
	if err != nil || d.GetUids()[0].GetHostId() != UnitLength {
		t.Errorf("pod d after a's release: %v, %v; want a's old range", d, err)
	}
}

func TestGetOrCreateRefusesRuntimesWithoutUserNamespaces(t *testing.T) {
	cases := []struct {
		name     string
		handlers Handlers
		handler  string
		wantErr  string
	}{
		{name: "default handler without support", handlers: handlers(handler("", false)),
			wantErr: "can't set `spec.hostUsers: false`, runtime does not support user namespaces"},
		{name: "RuntimeClass handler without support", handlers: handlers(handler("", true), handler("kata", false)), handler: "kata",
			wantErr: "can't set `spec.hostUsers: false`, RuntimeClass handler \"kata\" does not support user namespaces"},
		{name: "unknown handler", handlers: handlers(handler("", true)), handler: "gone",
			wantErr: "RuntimeClass handler \"gone\" does not support user namespaces: the handler \"gone\" is not known"},
		{name: "no runtime status yet", handlers: func() ([]*runtimeapi.RuntimeHandler, bool) { return nil, false },
			wantErr: "runtime does not support user namespaces: runtime handlers are not set"},
		{name: "no handler list", handlers: nil,
			wantErr: "runtime does not support user namespaces: runtime handlers are not set"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			m := openManager(t, dir, tc.handlers)
			_, err := m.GetOrCreateUserNamespaceMappings(usernsPod("a", ptr.To(false)), tc.handler)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want %q", err, tc.wantErr)
			}
			if _, ok := m.alloc.Allocated("a"); ok {
				t.Error("a refused pod holds a range")
			}
			if _, err := os.Stat(filepath.Join(dir, "a")); !os.IsNotExist(err) {
				t.Errorf("a refused pod got a directory: %v", err)
			}
		})
	}
}

func TestOpenRefusesBadFiles(t *testing.T) {
	u := UnitLength
	cases := []struct {
		name    string
		files   map[string]string
		wantErr string
	}{
		{name: "two mappings", files: map[string]string{"a": `{"uidMappings":[{"hostId":65536,"length":65536},{"hostId":131072,"length":65536}],"gidMappings":[]}`},
			wantErr: "no more than one mapping allowed"},
		{name: "uid and gid differ", files: map[string]string{"a": `{"uidMappings":[{"hostId":65536,"length":65536}],"gidMappings":[{"hostId":131072,"length":65536}]}`},
			wantErr: "GID and UID mapping should be identical"},
		{name: "root not mapped", files: map[string]string{"a": `{"uidMappings":[{"hostId":65536,"containerId":1,"length":65536}],"gidMappings":[{"hostId":65536,"containerId":1,"length":65536}]}`},
			wantErr: "UID 0 must be mapped"},
		{name: "outside the mapping", files: map[string]string{"a": string(encodeMappings(uint32(20*u), uint32(u)))},
			wantErr: "is out of range"},
		{name: "two pods on one range", files: map[string]string{"a": string(encodeMappings(uint32(u), uint32(u))), "b": string(encodeMappings(uint32(u), uint32(u)))},
			wantErr: "already taken"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for uid, content := range tc.files {
				if err := os.MkdirAll(filepath.Join(dir, uid), 0o750); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dir, uid, MappingsFile), []byte(content), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			_, err := Open(context.Background(), Options{PodsDir: dir, First: uint32(u), Length: uint32(8 * u), IDsPerPod: uint32(u), MaxPods: 8})
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), "record pod mappings for existing pod") {
				t.Fatalf("err = %v, want %q", err, tc.wantErr)
			}
		})
	}
}

// A mappings file that is not JSON (truncated, garbage) does not stop the
// start (issue 20 scenario 8): it is logged naming it and set aside; the
// other pods keep their ranges; no new range is given out while the pod with
// the unknown range is on the node, and is again once its directory is gone.
func TestOpenSetsAsideCorruptFile(t *testing.T) {
	dir := t.TempDir()
	good := encodeMappings(UnitLength, UnitLength)
	for uid, content := range map[string][]byte{"good": good, "truncated": good[:len(good)/2], "garbage": {0xff, 0, 0xfe}} {
		if err := os.MkdirAll(filepath.Join(dir, uid), 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, uid, MappingsFile), content, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var logs bytes.Buffer
	ctx := klog.NewContext(context.Background(), textlogger.NewLogger(textlogger.NewConfig(textlogger.Output(&logs))))
	clk := testingclock.NewFakeClock(time.Unix(1700000000, 0))
	m, err := Open(ctx, Options{PodsDir: dir, First: UnitLength, Length: 8 * UnitLength, IDsPerPod: UnitLength, MaxPods: 8,
		Handlers: handlers(handler("", true)), Intn: func(int) int { return 0 }, Clock: clk})
	if err != nil {
		t.Fatalf("a corrupt mappings file stopped the start: %v", err)
	}
	for _, uid := range []string{"truncated", "garbage"} {
		path := filepath.Join(dir, uid, MappingsFile)
		if !strings.Contains(logs.String(), path) {
			t.Errorf("the log does not name %s:\n%s", path, logs.String())
		}
		if _, err := os.Stat(path + ".corrupt-1700000000"); err != nil {
			t.Errorf("%s not set aside: %v", path, err)
		}
	}
	if got, ok := m.alloc.Allocated("good"); !ok || got != UnitLength {
		t.Errorf("the good pod's range = %d, %v; want %d", got, ok, UnitLength)
	}
	_, err = m.GetOrCreateUserNamespaceMappings(usernsPod("new", ptr.To(false)), "")
	if err == nil || !strings.Contains(err.Error(), "is unknown") {
		t.Fatalf("a new range was given out while a pod's range is unknown: %v", err)
	}
	for _, uid := range []string{"truncated", "garbage"} {
		if err := os.RemoveAll(filepath.Join(dir, uid)); err != nil {
			t.Fatal(err)
		}
	}
	m.CleanupOrphans(ctx)
	if _, err := m.GetOrCreateUserNamespaceMappings(usernsPod("new", ptr.To(false)), ""); err != nil {
		t.Fatalf("no range once the pods with unknown ranges are gone: %v", err)
	}
}

func TestOpenIgnoresPodsWithoutFileAndRefusesLinks(t *testing.T) {
	dir := t.TempDir()
	for _, d := range []string{"plain", "linked"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o750); err != nil {
			t.Fatal(err)
		}
	}
	target := filepath.Join(t.TempDir(), "elsewhere")
	if err := os.WriteFile(target, encodeMappings(UnitLength, UnitLength), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, filepath.Join(dir, "linked", MappingsFile)); err != nil {
		t.Fatal(err)
	}
	_, err := Open(context.Background(), Options{PodsDir: dir, First: UnitLength, Length: 8 * UnitLength, IDsPerPod: UnitLength, MaxPods: 8})
	if err == nil || !strings.Contains(err.Error(), `existing pod "linked"`) {
		t.Fatalf("err = %v, want the symlinked file refused", err)
	}
	if err := os.Remove(filepath.Join(dir, "linked", MappingsFile)); err != nil {
		t.Fatal(err)
	}
	m, err := Open(context.Background(), Options{PodsDir: filepath.Join(dir), First: UnitLength, Length: 8 * UnitLength, IDsPerPod: UnitLength, MaxPods: 8})
	if err != nil || len(m.alloc.Pods()) != 0 {
		t.Fatalf("Open: %v, pods %v; want none", err, m.alloc.Pods())
	}
	if _, err := Open(context.Background(), Options{PodsDir: filepath.Join(dir, "missing"), First: UnitLength, Length: 8 * UnitLength, IDsPerPod: UnitLength, MaxPods: 8}); err != nil {
		t.Fatalf("a missing pods dir: %v", err)
	}
}

func TestRunReleasesRangesOfRemovedPodDirs(t *testing.T) {
	dir := t.TempDir()
	m := openManager(t, dir, handlers(handler("", true)))
	for _, uid := range []string{"kept", "gone"} {
		if _, err := m.GetOrCreateUserNamespaceMappings(usernsPod(uid, ptr.To(false)), ""); err != nil {
			t.Fatal(err)
		}
	}
	// The sync loop removed an orphaned pod directory, file and all.
	if err := os.RemoveAll(filepath.Join(dir, "gone")); err != nil {
		t.Fatal(err)
	}
	clk := testingclock.NewFakeClock(time.Now())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); m.Run(ctx, clk, time.Minute) }()
	defer func() { cancel(); <-done }()
	eventually.True(t, "the removed pod's range to be released", func() bool {
		clk.Step(time.Minute)
		m.mu.Lock()
		defer m.mu.Unlock()
		_, gone := m.alloc.Allocated("gone")
		_, kept := m.alloc.Allocated("kept")
		return !gone && kept
	})
}
