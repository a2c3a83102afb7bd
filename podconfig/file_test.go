package podconfig

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/podutil"
	"github.com/nodelet/nodelet/internal/testsupport/eventually"
)

const testNode = "node-a"

const goodPod = `apiVersion: v1
kind: Pod
metadata:
  name: web
  labels:
    app: web
spec:
  containers:
  - name: nginx
    image: nginx
    ports:
    - containerPort: 80
    resources:
      limits:
        cpu: 100m
    readinessProbe:
      httpGet:
        port: 80
  - name: side
    image: busybox:1.36
    env:
    - name: NODE
      valueFrom:
        fieldRef:
          fieldPath: spec.nodeName
  volumes:
  - name: data
    image:
      reference: registry.example.com/data
  - name: pinned
    image:
      reference: registry.example.com/data:v1
`

func TestDecodeStaticPodDefaults(t *testing.T) {
	pod, err := decodeOne([]byte(goodPod), "/etc/kubernetes/manifests/web.yaml", testNode)
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	checks := []struct {
		name      string
		got, want interface{}
	}{
		{"name", pod.Name, "web-" + testNode},
		{"namespace", pod.Namespace, "default"},
		{"nodeName", pod.Spec.NodeName, testNode},
		{"restartPolicy", pod.Spec.RestartPolicy, v1.RestartPolicyAlways},
		{"dnsPolicy", pod.Spec.DNSPolicy, v1.DNSClusterFirst},
		{"grace", *pod.Spec.TerminationGracePeriodSeconds, int64(30)},
		{"scheduler", pod.Spec.SchedulerName, "default-scheduler"},
		{"securityContext set", pod.Spec.SecurityContext != nil, true},
		{"serviceLinks", *pod.Spec.EnableServiceLinks, true},
		{"pull latest", pod.Spec.Containers[0].ImagePullPolicy, v1.PullAlways},
		{"pull tagged", pod.Spec.Containers[1].ImagePullPolicy, v1.PullIfNotPresent},
		{"termMsgPath", pod.Spec.Containers[0].TerminationMessagePath, "/dev/termination-log"},
		{"termMsgPolicy", pod.Spec.Containers[1].TerminationMessagePolicy, v1.TerminationMessageReadFile},
		{"port protocol", pod.Spec.Containers[0].Ports[0].Protocol, v1.ProtocolTCP},
		{"requests from limits", pod.Spec.Containers[0].Resources.Requests.Cpu().String(), "100m"},
		{"probe period", pod.Spec.Containers[0].ReadinessProbe.PeriodSeconds, int32(10)},
		{"probe failure", pod.Spec.Containers[0].ReadinessProbe.FailureThreshold, int32(3)},
		{"probe path", pod.Spec.Containers[0].ReadinessProbe.HTTPGet.Path, "/"},
		{"probe scheme", pod.Spec.Containers[0].ReadinessProbe.HTTPGet.Scheme, v1.URISchemeHTTP},
		{"fieldRef version", pod.Spec.Containers[1].Env[0].ValueFrom.FieldRef.APIVersion, "v1"},
		{"hash = uid", pod.Annotations[podutil.AnnotationConfigHash], string(pod.UID)},
		{"source", pod.Annotations[podutil.AnnotationConfigSource], podutil.SourceFile},
		{"phase", pod.Status.Phase, v1.PodPending},
		{"labels kept", pod.Labels["app"], "web"},
		{"image volume pull latest", pod.Spec.Volumes[0].Image.PullPolicy, v1.PullAlways},
		{"image volume pull tagged", pod.Spec.Volumes[1].Image.PullPolicy, v1.PullIfNotPresent},
		{"toleration", pod.Spec.Tolerations, []v1.Toleration{{Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoExecute}}},
	}
	for _, c := range checks {
		if !equalish(c.got, c.want) {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
	if len(pod.UID) != 32 {
		t.Errorf("uid %q is not an md5 hex", pod.UID)
	}
}

func equalish(a, b interface{}) bool {
	if ta, ok := a.([]v1.Toleration); ok {
		tb := b.([]v1.Toleration)
		if len(ta) != len(tb) {
			return false
		}
		for i := range ta {
			if ta[i] != tb[i] {
				return false
			}
		}
		return true
	}
	return a == b
}

func TestStaticPodUIDStability(t *testing.T) {
	a, _ := decodeOne([]byte(goodPod), "/m/web.yaml", testNode)
	b, _ := decodeOne([]byte(goodPod), "/m/web.yaml", testNode)
	otherNode, _ := decodeOne([]byte(goodPod), "/m/web.yaml", "node-b")
	otherPath, _ := decodeOne([]byte(goodPod), "/m/web2.yaml", testNode)
	edited, _ := decodeOne([]byte(goodPod+"  hostNetwork: true\n"), "/m/web.yaml", testNode)
	if a.UID != b.UID {
		t.Errorf("same input gave %q and %q", a.UID, b.UID)
	}
	for name, p := range map[string]*v1.Pod{"node": otherNode, "path": otherPath, "content": edited} {
		if p.UID == a.UID {
			t.Errorf("different %s gave the same UID", name)
		}
	}
}

func TestDecodeStaticPodRejects(t *testing.T) {
	tests := []struct {
		name     string
		manifest string
		wantErr  string
	}{
		{"invalid yaml", "kind: Pod\n  metadata: [", "parse manifest"},
		{"empty", "  \n", "empty"},
		{"wrong kind", "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\n", `kind is "Deployment"`},
		{"wrong version", "apiVersion: v2\nkind: Pod\nmetadata: {name: x}\n", `apiVersion is "v2"`},
		{"no name", "apiVersion: v1\nkind: Pod\nspec:\n  containers: [{name: c, image: i}]\n", "metadata.name"},
		{"no containers", "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec: {}\n", "spec.containers is empty"},
		{"no image", "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec:\n  containers: [{name: c}]\n", "no image"},
		{"dup container", "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec:\n  containers: [{name: c, image: i}, {name: c, image: i}]\n", "used twice"},
		{"bad name", "apiVersion: v1\nkind: Pod\nmetadata: {name: X_Y}\nspec:\n  containers: [{name: c, image: i}]\n", "is invalid"},
		{"secret volume", "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec:\n  containers: [{name: c, image: i}]\n  volumes: [{name: s, secret: {secretName: s}}]\n", "secret volumes"},
		{"configmap volume", "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec:\n  containers: [{name: c, image: i}]\n  volumes: [{name: s, configMap: {name: s}}]\n", "configMap volumes"},
		{"sa token", "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec:\n  containers: [{name: c, image: i}]\n  volumes: [{name: s, projected: {sources: [{serviceAccountToken: {path: t}}]}}]\n", "serviceAccountToken"},
		{"secret env", "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec:\n  containers: [{name: c, image: i, env: [{name: E, valueFrom: {secretKeyRef: {name: s, key: k}}}]}]\n", "env"},
		{"service account", "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec:\n  serviceAccountName: sa\n  containers: [{name: c, image: i}]\n", "service account"},
		{"unmasked proc in the host user namespace", "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec:\n  containers: [{name: c, image: i, securityContext: {procMount: Unmasked}}]\n",
			"container \"c\": securityContext.procMount: Invalid value: \"Unmasked\": `hostUsers` must be false to use `Unmasked`"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := decodeOne([]byte(tt.manifest), "/m/f.yaml", testNode)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// next returns the next update or fails after a while.
func next(t *testing.T, c *Config) Update {
	t.Helper()
	select {
	case u := <-c.Updates():
		return u
	case <-time.After(5 * time.Second):
		t.Fatal("no update")
	}
	return Update{}
}

func expectNone(t *testing.T, c *Config) {
	t.Helper()
	select {
	case u := <-c.Updates():
		t.Fatalf("unexpected update %s with %d pods", u.Op, len(u.Pods))
	case <-time.After(50 * time.Millisecond):
	}
}

func TestFileSourceDirectory(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "web.yaml"), goodPod)
	writeFile(t, filepath.Join(dir, "bad.yaml"), "apiVersion: v1\nkind: Pod\nspec: {}\n")
	writeFile(t, filepath.Join(dir, "broken.json"), "{not json")
	writeFile(t, filepath.Join(dir, ".hidden.yaml"), strings.Replace(goodPod, "name: web", "name: hidden", 1))
	writeFile(t, filepath.Join(dir, "notes.txt"), "not a manifest\n")
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "sub", "x.yaml"), strings.Replace(goodPod, "name: web", "name: sub", 1))

	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 2, 13, 0, 0, 0, time.UTC))
	c := New(testNode, clk, WithSources(podutil.SourceFile))
	if c.SourcesReady() {
		t.Fatal("ready before the first read")
	}
	c.readFileSource(context.Background(), dir)
	u := next(t, c)
	if u.Op != OpAdd || u.Source != podutil.SourceFile || len(u.Pods) != 1 || u.Pods[0].Name != "web-"+testNode {
		t.Fatalf("first update = %s %s %d pods, want Add of web", u.Op, u.Source, len(u.Pods))
	}
	if !c.SourcesReady() {
		t.Fatal("not ready after the first read")
	}
	first := u.Pods[0]
	if first.Annotations[podutil.AnnotationConfigSeen] != "2026-12-02T13:00:00Z" {
		t.Errorf("seen = %q", first.Annotations[podutil.AnnotationConfigSeen])
	}

	// Same content again: nothing, even with the clock moved (seen stays put).
	clk.Step(time.Minute)
	c.readFileSource(context.Background(), dir)
	expectNone(t, c)

	// A restarted node reads the same UID.
	c2 := New(testNode, clk)
	c2.readFileSource(context.Background(), dir)
	if u2 := next(t, c2); u2.Pods[0].UID != first.UID {
		t.Errorf("UID after restart %q, want %q", u2.Pods[0].UID, first.UID)
	}

	// An edit is a new pod (new hash): the old one is removed, the new one added.
	writeFile(t, filepath.Join(dir, "web.yaml"), strings.Replace(goodPod, "app: web", "app: web2", 1))
	c.readFileSource(context.Background(), dir)
	rm := next(t, c)
	add := next(t, c)
	if rm.Op != OpRemove || rm.Pods[0].UID != first.UID {
		t.Errorf("got %s of %s, want Remove of %s", rm.Op, rm.Pods[0].UID, first.UID)
	}
	if add.Op != OpAdd || add.Pods[0].UID == first.UID || add.Pods[0].Labels["app"] != "web2" {
		t.Errorf("got %s of %s (app=%s), want Add of the edited pod", add.Op, add.Pods[0].UID, add.Pods[0].Labels["app"])
	}

	// Removing the file removes the pod.
	if err := os.Remove(filepath.Join(dir, "web.yaml")); err != nil {
		t.Fatal(err)
	}
	c.readFileSource(context.Background(), dir)
	if u := next(t, c); u.Op != OpRemove || u.Pods[0].UID != add.Pods[0].UID {
		t.Errorf("got %s, want Remove of the edited pod", u.Op)
	}
}

func TestFileSourceSingleFileAndMissingPath(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "pod.manifest") // a single file is read whatever its name
	writeFile(t, f, goodPod)
	c := New(testNode, clocktesting.NewFakeClock(time.Now()))
	c.readFileSource(context.Background(), f)
	if u := next(t, c); u.Op != OpAdd || len(u.Pods) != 1 {
		t.Fatalf("got %s with %d pods, want Add of 1", u.Op, len(u.Pods))
	}

	missing := New(testNode, clocktesting.NewFakeClock(time.Now()))
	missing.readFileSource(context.Background(), filepath.Join(dir, "nope"))
	expectNone(t, missing)
	if !missing.SourcesReady() {
		t.Error("a missing path must still make the file source ready")
	}
}

func TestFileSourceDuplicateName(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a.yaml"), goodPod)
	writeFile(t, filepath.Join(dir, "b.yaml"), goodPod+"  hostNetwork: true\n")
	c := New(testNode, clocktesting.NewFakeClock(time.Now()))
	c.readFileSource(context.Background(), dir)
	u := next(t, c)
	if len(u.Pods) != 1 || u.Pods[0].Spec.HostNetwork {
		t.Fatalf("got %d pods (hostNetwork=%v), want only a.yaml's", len(u.Pods), len(u.Pods) > 0 && u.Pods[0].Spec.HostNetwork)
	}
}

func TestRunFileSourcePolls(t *testing.T) {
	dir := t.TempDir()
	clk := clocktesting.NewFakeClock(time.Now())
	c := New(testNode, clk, WithSources(podutil.SourceFile))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); c.RunFileSource(ctx, dir, 20*time.Second) }()
	defer func() { cancel(); <-done }()

	eventually.True(t, "the sources to be ready", c.SourcesReady)
	writeFile(t, filepath.Join(dir, "web.yaml"), goodPod)
	eventually.True(t, "the file source's timer", clk.HasWaiters)
	clk.Step(20 * time.Second)
	if u := next(t, c); u.Op != OpAdd || len(u.Pods) != 1 {
		t.Fatalf("got %s, want Add after one period", u.Op)
	}
}

// podNames are the names of pods, in order.
func podNames(pods []*v1.Pod) []string {
	var out []string
	for _, p := range pods {
		out = append(out, p.Name)
	}
	return out
}

// decodeOne decodes a manifest that must hold exactly one pod.
func decodeOne(data []byte, file, nodeName string) (*v1.Pod, error) {
	pods, err := decodeManifest(data, file, nodeName)
	if err != nil {
		return nil, err
	}
	if len(pods) != 1 {
		return nil, fmt.Errorf("%d pods, want 1", len(pods))
	}
	return pods[0], nil
}

// loadBounded runs loadStaticPods on dir and fails the test if it does not
// return in time, rather than hanging it; unblock undoes whatever a hung read
// waits on, so the goroutine left behind can finish.
func loadBounded(t *testing.T, ctx context.Context, c *Config, dir string, unblock func()) []*v1.Pod {
	t.Helper()
	type result struct {
		pods []*v1.Pod
		err  error
	}
	done := make(chan result, 1)
	go func() {
		pods, err := c.loadStaticPods(ctx, dir)
		done <- result{pods, err}
	}()
	// Only a test with a file that can block (a FIFO: unblock opens its other end)
	// needs a bound, and a generous one: it tells a blocked open from a slow
	// machine. Without one, reading a 10 MiB manifest under -race on a loaded
	// machine takes as long as it takes (go test's -timeout catches a real hang).
	var bound <-chan time.Time
	if unblock != nil {
		bound = time.After(time.Minute)
	}
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatalf("loadStaticPods: %v", r.err)
		}
		return r.pods
	case <-bound:
		unblock()
		t.Fatal("loadStaticPods did not return in 1m: it is blocked on a file that is not a regular file")
	}
	return nil
}

func TestFileSourceSkipsFIFO(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "web.yaml"), goodPod)
	fifo := filepath.Join(dir, "fifo.yaml")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	c := New(testNode, clocktesting.NewFakeClock(time.Now()))
	pods := loadBounded(t, context.Background(), c, dir, func() {
		// A writer that opens and closes gives a blocked reader EOF.
		if f, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			f.Close()
		}
	})
	if got := podNames(pods); len(got) != 1 || got[0] != "web-"+testNode {
		t.Fatalf("pods = %v, want only web", got)
	}
}

func TestFileSourceSkipsDevicesAndFollowsLinksToFiles(t *testing.T) {
	dir := t.TempDir()
	elsewhere := t.TempDir()
	writeFile(t, filepath.Join(elsewhere, "pod"), goodPod)
	// A link to a regular file is read, as upstream (it follows symlinks).
	if err := os.Symlink(filepath.Join(elsewhere, "pod"), filepath.Join(dir, "linked.yaml")); err != nil {
		t.Fatal(err)
	}
	// A link to /dev/zero would be read forever; a dangling link is no file.
	if err := os.Symlink("/dev/zero", filepath.Join(dir, "zero.yaml")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(elsewhere, "nope"), filepath.Join(dir, "dangling.yaml")); err != nil {
		t.Fatal(err)
	}
	c := New(testNode, clocktesting.NewFakeClock(time.Now()))
	pods := loadBounded(t, context.Background(), c, dir, nil)
	if got := podNames(pods); len(got) != 1 || got[0] != "web-"+testNode {
		t.Fatalf("pods = %v, want only the linked web", got)
	}
}

// bigManifest is a valid pod named name padded with a comment to size bytes.
func bigManifest(name string, size int) string {
	m := strings.Replace(goodPod, "name: web", "name: "+name, 1)
	pad := size - len(m) - 2
	return m + "#" + strings.Repeat("x", pad) + "\n"
}

func TestFileSourceRefusesOversizedManifest(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "big.yaml"), bigManifest("big", maxManifestSize+1))
	writeFile(t, filepath.Join(dir, "fits.yaml"), bigManifest("fits", maxManifestSize))
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
	ctx := klog.NewContext(context.Background(), logger)
	c := New(testNode, clocktesting.NewFakeClock(time.Now()))
	pods := loadBounded(t, ctx, c, dir, nil)
	if got := podNames(pods); len(got) != 1 || got[0] != "fits-"+testNode {
		t.Fatalf("pods = %v, want only fits (big is over the %d-byte limit)", got, maxManifestSize)
	}
	logs := logger.GetSink().(ktesting.Underlier).GetBuffer().String()
	if !strings.Contains(logs, filepath.Join(dir, "big.yaml")) || !strings.Contains(logs, "limit of 10485760 bytes") {
		t.Errorf("the log does not name the refused file and the limit:\n%s", logs)
	}
}

const podList = `apiVersion: v1
kind: PodList
items:
- metadata:
    name: one
  spec:
    containers: [{name: c, image: busybox:1.36}]
- apiVersion: v1
  kind: Pod
  metadata:
    name: two
    namespace: kube-system
  spec:
    containers: [{name: c, image: busybox:1.36}]
`

func TestFileSourcePodList(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "list.yaml"), podList)
	c := New(testNode, clocktesting.NewFakeClock(time.Now()))
	pods := loadBounded(t, context.Background(), c, dir, nil)
	if got := podNames(pods); len(got) != 2 || got[0] != "one-"+testNode || got[1] != "two-"+testNode {
		t.Fatalf("pods = %v, want one and two", got)
	}
	if pods[0].UID == pods[1].UID {
		t.Errorf("both pods of the list have UID %s", pods[0].UID)
	}
	if pods[0].Namespace != "default" || pods[1].Namespace != "kube-system" {
		t.Errorf("namespaces %s, %s", pods[0].Namespace, pods[1].Namespace)
	}
	for _, p := range pods {
		if p.Spec.NodeName != testNode || p.Annotations[podutil.AnnotationConfigHash] != string(p.UID) {
			t.Errorf("pod %s: nodeName %q, hash %q, uid %q", p.Name, p.Spec.NodeName, p.Annotations[podutil.AnnotationConfigHash], p.UID)
		}
	}

	// Editing one item gives only that pod a new UID.
	writeFile(t, filepath.Join(dir, "list.yaml"), strings.Replace(podList, "namespace: kube-system", "namespace: kube-system\n    labels: {edited: \"yes\"}", 1))
	again := loadBounded(t, context.Background(), c, dir, nil)
	if len(again) != 2 || again[0].UID != pods[0].UID || again[1].UID == pods[1].UID {
		t.Errorf("after editing item two: UIDs %v, want one's unchanged and two's new", []string{string(again[0].UID), string(again[1].UID)})
	}

	// One bad item refuses the whole list (as a bad pod refuses its file).
	writeFile(t, filepath.Join(dir, "list.yaml"), podList+"- metadata: {name: three}\n  spec: {containers: []}\n")
	if got := podNames(loadBounded(t, context.Background(), c, dir, nil)); len(got) != 0 {
		t.Errorf("pods = %v from a list with an invalid item, want none", got)
	}
}

func TestFileSourceReadsEveryVisibleFile(t *testing.T) {
	dir := t.TempDir()
	// Upstream reads every file whose name does not start with a dot, whatever its extension.
	writeFile(t, filepath.Join(dir, "web.manifest"), goodPod)
	writeFile(t, filepath.Join(dir, "plain"), strings.Replace(goodPod, "name: web", "name: plain", 1))
	writeFile(t, filepath.Join(dir, ".web.yaml.swp"), strings.Replace(goodPod, "name: web", "name: swp", 1))
	writeFile(t, filepath.Join(dir, ".hidden"), strings.Replace(goodPod, "name: web", "name: hidden", 1))
	c := New(testNode, clocktesting.NewFakeClock(time.Now()))
	pods := loadBounded(t, context.Background(), c, dir, nil)
	if got := podNames(pods); len(got) != 2 || got[0] != "plain-"+testNode || got[1] != "web-"+testNode {
		t.Fatalf("pods = %v, want plain and web (hidden files ignored)", got)
	}
}

func TestFileSourcePathItselfNotARegularFile(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "web.yaml"), goodPod)
	link := filepath.Join(dir, "manifest")
	if err := os.Symlink(filepath.Join(dir, "web.yaml"), link); err != nil {
		t.Fatal(err)
	}
	c := New(testNode, clocktesting.NewFakeClock(time.Now()))
	c.readFileSource(context.Background(), link)
	if u := next(t, c); u.Op != OpAdd || len(u.Pods) != 1 {
		t.Fatalf("got %s with %d pods, want Add of 1", u.Op, len(u.Pods))
	}
	// The file is swapped for /dev/zero: an error, and the pod stays.
	if err := os.Remove(link); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/dev/zero", link); err != nil {
		t.Fatal(err)
	}
	if _, err := c.loadStaticPods(context.Background(), link); err == nil || !strings.Contains(err.Error(), "neither a directory nor a regular file") {
		t.Fatalf("err = %v, want one saying the path is not a regular file", err)
	}
	c.readFileSource(context.Background(), link)
	expectNone(t, c)
}

// TestSnapshotSourceReadyOnlyOnceSent: a source's first snapshot is on Updates before the
// source reports ready (the API source's order too), so whoever sees SourcesReady finds the
// source's pods there or already handled.
func TestSnapshotSourceReadyOnlyOnceSent(t *testing.T) {
	c := New(testNode, clocktesting.NewFakeClock(time.Now()), WithSources(podutil.SourceFile))
	// A full buffer: the snapshot's send blocks until the reader takes one.
	for i := 0; i < updatesBuffer; i++ {
		c.updates <- Update{Op: OpUpdate}
	}
	done := make(chan struct{})
	go func() {
		c.setSnapshot(podutil.SourceFile, []*v1.Pod{apiPod("static", "uid-s", testNode)})
		close(done)
	}()
	for deadline := time.Now().Add(200 * time.Millisecond); time.Now().Before(deadline); {
		if c.SourcesReady() {
			t.Fatal("the source reports ready while its first snapshot is not sent yet")
		}
		time.Sleep(time.Millisecond)
	}
	for i := 0; i < updatesBuffer; i++ {
		<-c.updates
	}
	<-done
	if !c.SourcesReady() {
		t.Fatal("the source is not ready after its first snapshot was sent")
	}
	if u := <-c.updates; u.Op != OpAdd || len(u.Pods) != 1 || u.Pods[0].UID != "uid-s" {
		t.Fatalf("first update after the fillers = %+v, want the snapshot's Add", u)
	}
}

// An unmasked /proc is fine in the pod's own user namespace (hostUsers: false).
func TestDecodeStaticPodUnmaskedProcWithUserNamespace(t *testing.T) {
	manifest := "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec:\n  hostUsers: false\n  containers: [{name: c, image: i, securityContext: {procMount: Unmasked}}]\n"
	if _, err := decodeOne([]byte(manifest), "/m/f.yaml", testNode); err != nil {
		t.Fatal(err)
	}
}

// waitUpdate returns the next update, waiting at most eventually.Timeout: long
// for a loaded machine, and the fake clock is not stepped, so only the watch
// can send it.
func waitUpdate(t *testing.T, c *Config, what string) Update {
	t.Helper()
	select {
	case u := <-c.Updates():
		return u
	case <-time.After(eventually.Timeout):
		t.Fatalf("no update within %s: %s", eventually.Timeout, what)
	}
	return Update{}
}

// writeRenamed writes content to path through a hidden temporary file and a
// rename, as kubeadm and the e2e framework do.
func writeRenamed(t *testing.T, path, content string) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	writeFile(t, tmp, content)
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// runFileSource runs c's file source on path until the test ends.
func runFileSource(t *testing.T, c *Config, path string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); c.RunFileSource(ctx, path, 20*time.Second) }()
	t.Cleanup(func() { cancel(); <-done })
	// The watch is in place before the first read, which makes the source ready.
	eventually.True(t, "the sources to be ready", c.SourcesReady)
}

func TestRunFileSourceWatchSeesNewManifestWithoutWaitingForThePeriod(t *testing.T) {
	for _, tc := range []struct {
		name  string
		write func(t *testing.T, path, content string)
	}{
		{"written in place", writeFile},
		{"renamed into place", writeRenamed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			c := New(testNode, clocktesting.NewFakeClock(time.Now()), WithSources(podutil.SourceFile))
			runFileSource(t, c, dir)

			tc.write(t, filepath.Join(dir, "web.yaml"), goodPod)
			u := waitUpdate(t, c, "the new manifest")
			if u.Op != OpAdd || len(u.Pods) != 1 || u.Pods[0].Name != "web-"+testNode {
				t.Fatalf("got %s of %v, want Add of web", u.Op, podNames(u.Pods))
			}

			// An edit (a kubeadm upgrade) replaces the pod, and a removal removes it.
			tc.write(t, filepath.Join(dir, "web.yaml"), strings.Replace(goodPod, "app: web", "app: web2", 1))
			if rm := waitUpdate(t, c, "the old pod's removal"); rm.Op != OpRemove || rm.Pods[0].UID != u.Pods[0].UID {
				t.Fatalf("got %s, want Remove of the first pod", rm.Op)
			}
			add := waitUpdate(t, c, "the edited pod")
			if add.Op != OpAdd || add.Pods[0].Labels["app"] != "web2" {
				t.Fatalf("got %s (app=%s), want Add of the edited pod", add.Op, add.Pods[0].Labels["app"])
			}
			if err := os.Remove(filepath.Join(dir, "web.yaml")); err != nil {
				t.Fatal(err)
			}
			if rm := waitUpdate(t, c, "the removed manifest"); rm.Op != OpRemove || rm.Pods[0].UID != add.Pods[0].UID {
				t.Fatalf("got %s, want Remove of the edited pod", rm.Op)
			}
		})
	}
}

func TestRunFileSourceWatchesASingleFileThroughItsDirectory(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "pod.manifest")
	writeFile(t, f, goodPod)
	writeFile(t, filepath.Join(dir, "other.yaml"), strings.Replace(goodPod, "name: web", "name: other", 1))
	c := New(testNode, clocktesting.NewFakeClock(time.Now()), WithSources(podutil.SourceFile))
	runFileSource(t, c, f)
	first := waitUpdate(t, c, "the first read")
	if first.Op != OpAdd || len(first.Pods) != 1 {
		t.Fatalf("got %s of %v, want Add of web", first.Op, podNames(first.Pods))
	}

	// Replacing the file by rename ends a watch on its inode; the directory's goes on.
	writeRenamed(t, f, strings.Replace(goodPod, "app: web", "app: web2", 1))
	if rm := waitUpdate(t, c, "the replaced file"); rm.Op != OpRemove {
		t.Fatalf("got %s, want Remove of the first pod", rm.Op)
	}
	if add := waitUpdate(t, c, "the replaced file"); add.Op != OpAdd || add.Pods[0].Labels["app"] != "web2" {
		t.Fatalf("got %s, want Add of the edited pod", add.Op)
	}
	writeRenamed(t, f, strings.Replace(goodPod, "app: web", "app: web3", 1))
	if rm := waitUpdate(t, c, "the file replaced again"); rm.Op != OpRemove {
		t.Fatalf("got %s, want Remove of the second pod", rm.Op)
	}
}

func TestRunFileSourceResyncsWhatTheWatchCannotSee(t *testing.T) {
	// The manifest is a symlink to a file elsewhere: a change of the target is not
	// an event of the watched directory, so only the period finds it.
	dir, elsewhere := t.TempDir(), t.TempDir()
	target := filepath.Join(elsewhere, "web.yaml")
	writeFile(t, target, goodPod)
	if err := os.Symlink(target, filepath.Join(dir, "web.yaml")); err != nil {
		t.Fatal(err)
	}
	clk := clocktesting.NewFakeClock(time.Now())
	c := New(testNode, clk, WithSources(podutil.SourceFile))
	runFileSource(t, c, dir)
	first := waitUpdate(t, c, "the first read")

	writeFile(t, target, strings.Replace(goodPod, "app: web", "app: web2", 1))
	eventually.True(t, "the file source's timer", clk.HasWaiters)
	clk.Step(20 * time.Second)
	if rm := waitUpdate(t, c, "the resync"); rm.Op != OpRemove || rm.Pods[0].UID != first.Pods[0].UID {
		t.Fatalf("got %s, want Remove of the first pod after one period", rm.Op)
	}
	if add := waitUpdate(t, c, "the resync"); add.Op != OpAdd || add.Pods[0].Labels["app"] != "web2" {
		t.Fatalf("got %s, want Add of the edited pod after one period", add.Op)
	}
}

func TestRunFileSourceWatchesADirectoryCreatedLater(t *testing.T) {
	// kubeadm creates the manifest directory after the node agent may have started:
	// the period finds it and adds the watch, which then sees the next manifest at once.
	dir := filepath.Join(t.TempDir(), "manifests")
	clk := clocktesting.NewFakeClock(time.Now())
	c := New(testNode, clk, WithSources(podutil.SourceFile))
	runFileSource(t, c, dir)

	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeRenamed(t, filepath.Join(dir, "web.yaml"), goodPod)
	eventually.True(t, "the file source's timer", clk.HasWaiters)
	clk.Step(20 * time.Second)
	if u := waitUpdate(t, c, "the first period after the directory appeared"); u.Op != OpAdd || len(u.Pods) != 1 {
		t.Fatalf("got %s of %v, want Add of web", u.Op, podNames(u.Pods))
	}
	writeRenamed(t, filepath.Join(dir, "other.yaml"), strings.Replace(goodPod, "name: web", "name: other", 1))
	if u := waitUpdate(t, c, "the watch added by that read"); u.Op != OpAdd || len(u.Pods) != 1 || u.Pods[0].Name != "other-"+testNode {
		t.Fatalf("got %s of %v, want Add of other", u.Op, podNames(u.Pods))
	}
}
