//go:build chaos

package chaos

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/test/e2e/framework"
)

// corruption is one way of spoiling a file: what a crash mid-write (truncated) or a bad
// disk (garbage) leaves.
type corruption struct {
	name  string
	spoil func(orig []byte) []byte
}

var corruptions = []corruption{
	{"truncated", func([]byte) []byte { return nil }},
	{"garbage", func(orig []byte) []byte {
		const junk = "\x00\xff\xfe{\"not\": json ]]\n\x7fELF"
		b := make([]byte, max(64, len(orig)))
		for i := range b {
			b[i] = junk[i%len(junk)]
		}
		return b
	}},
}

// stateFile is a file nodelet keeps under its root dir.
type stateFile struct {
	rel  string // path under the root dir
	orig []byte
	mode fs.FileMode
	// podFile: under pods/<uid>/ — what nodelet writes for a container (etc-hosts, the
	// termination message file) and never reads back at a start, so a start has nothing
	// to ignore and nothing to say about it; only "no pod lost" applies.
	podFile bool
}

// TestCorruptStateFiles runs -chaos.state-pods pods, stops nodelet, and for each way of
// corrupting (truncated, garbage) spoils every file nodelet keeps under its root dir
// (found by walking it: checkpoints, image GC state, pull records, the pods' etc-hosts and
// termination message files; sockets, plugin dirs and volume contents are not nodelet's
// state) and starts it again. It must start (node Ready), name in its log each node-level
// file it ignored, and lose no pod: every pod Running and Ready in its own /pods, with the
// same container as before and 0 restarts. When a start fails, or with
// -chaos.state-each, each file is then spoiled alone, one start each, so the failure names
// exactly the files that cause it.
func TestCorruptStateFiles(t *testing.T) {
	f := framework.New(t)
	ctx := context.Background()
	ns := f.NewNamespace()
	count := *statePods
	n := startNode(t, f, count, nil)
	cs := fastClient(t, f)
	createPods(t, ctx, cs, podNames("state", count), func(name string) *v1.Pod { return sleepPod(f, ns, name) })
	waitAllReady(t, ctx, cs, ns, count, 3*time.Minute)
	before, err := runningContainers(ctx, f.CRI)
	if err != nil {
		t.Fatal(err)
	}
	// The periodic writers (status, pull records) had their first go.
	time.Sleep(5 * time.Second)
	if err := n.Stop(); err != nil {
		t.Fatalf("stopping nodelet: %v", err)
	}
	files := stateFiles(t, n.RootDir)
	figure(t, "state_files", len(files))
	for _, sf := range files {
		t.Logf("state file %s (%d bytes)", sf.rel, len(sf.orig))
	}
	if len(files) == 0 {
		t.Fatalf("no files under %s to corrupt", n.RootDir)
	}

	check := func(label string, spoilt []stateFile, c corruption) []string {
		t.Helper()
		restore(t, n.RootDir, files)
		for _, sf := range spoilt {
			if err := os.WriteFile(filepath.Join(n.RootDir, sf.rel), c.spoil(sf.orig), sf.mode); err != nil {
				t.Fatalf("corrupting %s: %v", sf.rel, err)
			}
		}
		problems, took := startWithCorruptState(t, ctx, f, n, ns, count, before, spoilt)
		figure(t, "start_"+label, took)
		running := n.Running() // an exit of its own is already among the problems
		if err := n.Stop(); running && err != nil {
			problems = append(problems, fmt.Sprintf("nodelet's exit on SIGTERM: %v", err))
		}
		return problems
	}

	var failed []corruption
	for _, c := range corruptions {
		problems := check("all_"+c.name, files, c)
		figure(t, "problems_all_"+c.name, len(problems))
		for _, p := range problems {
			t.Errorf("every state file %s: %s", c.name, p)
		}
		if len(problems) > 0 || *stateEach {
			failed = append(failed, c)
		}
	}
	// One start per file (one per kind for the pods' files), to name the culprits.
	var culprits []string
	for _, c := range failed {
		for _, sf := range onePerKind(files) {
			problems := check(c.name+"_"+kindOf(sf.rel), []stateFile{sf}, c)
			if len(problems) > 0 {
				culprits = append(culprits, fmt.Sprintf("%s %s: %s", sf.rel, c.name, strings.Join(problems, "; ")))
			}
		}
	}
	figure(t, "culprits", len(culprits))
	for _, c := range culprits {
		t.Errorf("alone: %s", c)
	}
	restore(t, n.RootDir, files)
	figure(t, "loadavg", loadavg())
}

// startWithCorruptState starts the stopped nodelet and returns what went wrong, judged as a
// user would: it runs and its node goes Ready, its log names each node-level spoilt file,
// and no pod was lost (its /pods lists every pod Running and Ready, containerd still runs
// the same containers, the API counts 0 restarts).
func startWithCorruptState(t *testing.T, ctx context.Context, f *framework.Framework, n *framework.Nodelet, ns string, count int, before map[string]string, spoilt []stateFile) ([]string, time.Duration) {
	t.Helper()
	logStart := len(n.Logs())
	start := time.Now()
	n.Restart() // nodelet is stopped: this starts it
	var problems []string
	newLog := func() string {
		l := n.Logs()
		if len(l) < logStart {
			return l
		}
		return l[logStart:]
	}
	err := framework.WaitFor(ctx, time.Minute, "node Ready after the start", func(ctx context.Context) (bool, error) {
		if !n.Running() {
			return false, &framework.StopError{Err: fmt.Errorf("nodelet exited: %v", n.ExitError())}
		}
		return nodeReadySince(ctx, f, start)
	})
	if err != nil {
		return append(problems, fmt.Sprintf("%v; log:\n%s", err, tail(newLog(), 15))), time.Since(start)
	}
	var notReady []string
	err = framework.WaitFor(ctx, time.Minute, "every pod Running and Ready in the node agent's /pods", func(ctx context.Context) (bool, error) {
		if !n.Running() {
			return false, &framework.StopError{Err: fmt.Errorf("nodelet exited: %v", n.ExitError())}
		}
		nr, err := agentPodsNotReady(ctx, f, ns, count)
		notReady = nr
		return err == nil && len(nr) == 0, err
	})
	took := time.Since(start)
	if err != nil {
		problems = append(problems, fmt.Sprintf("%v; not Ready: %s", err, firstN(notReady, 10)))
	}
	// A pod the start decided to kill (re-admission, a forgotten allocation) goes within
	// a sync or two.
	time.Sleep(5 * time.Second)
	if !n.Running() {
		problems = append(problems, fmt.Sprintf("nodelet exited after the start: %v; log:\n%s", n.ExitError(), tail(newLog(), 15)))
	}
	now, err := runningContainers(ctx, f.CRI)
	if err != nil {
		return append(problems, err.Error()), took
	}
	for uid, id := range before {
		if now[uid] != id {
			problems = append(problems, fmt.Sprintf("pod uid %s: running container %s before, %q now", uid, short(id), short(now[uid])))
		}
	}
	pods, err := listPods(ctx, f.Client, ns)
	if err != nil {
		return append(problems, err.Error()), took
	}
	if s := summarize(pods); s.total != count || s.restarts != 0 || len(s.notReady) > 0 {
		problems = append(problems, fmt.Sprintf("API: %d pods (want %d), %d restarts (want 0), not Running+Ready: %s", s.total, count, s.restarts, firstN(s.notReady, 10)))
	}
	logText := newLog()
	var unnamed []string
	for _, sf := range spoilt {
		if !sf.podFile && !strings.Contains(logText, filepath.Base(sf.rel)) {
			unnamed = append(unnamed, sf.rel)
		}
	}
	if len(unnamed) > 0 {
		problems = append(problems, "the log does not name "+strings.Join(unnamed, ", "))
	}
	return problems, took
}

// nodeReadySince reports whether the node is Ready with a heartbeat from since on.
func nodeReadySince(ctx context.Context, f *framework.Framework, since time.Time) (bool, error) {
	node, err := f.Client.CoreV1().Nodes().Get(ctx, f.Env.NodeName, metav1.GetOptions{})
	if err != nil {
		return false, err
	}
	for _, c := range node.Status.Conditions {
		if c.Type == v1.NodeReady {
			return c.Status == v1.ConditionTrue && !c.LastHeartbeatTime.Time.Before(since.Truncate(time.Second)), nil
		}
	}
	return false, nil
}

// runningContainers maps each pod uid to its running container's ID (the last one listed
// when there are several: the comparison then fails on the doubled pod anyway).
func runningContainers(ctx context.Context, c *framework.CRIClient) (map[string]string, error) {
	ctrs, err := c.Containers(ctx, nil)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, ctr := range ctrs {
		if ctr.State == runtimeapi.ContainerState_CONTAINER_RUNNING {
			out[ctr.Labels[framework.LabelPodUID]] = ctr.Id
		}
	}
	return out, nil
}

// stateFiles walks the (stopped) nodelet's root dir for the regular files it keeps. Not
// state: sockets, the plugin registration and CSI plugin dirs, certificates, and what lies
// in the pods' volumes (the user's data, or the API's).
func stateFiles(t *testing.T, root string) []stateFile {
	t.Helper()
	skipDirs := regexp.MustCompile(`^(plugins|plugins_registry|pki|pod-resources)$|^pods/[^/]+/(volumes|volume-subpaths|plugins)$`)
	var out []stateFile
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if skipDirs.MatchString(rel) {
				return fs.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() || strings.HasSuffix(rel, ".crt") || strings.HasSuffix(rel, ".key") || strings.HasSuffix(rel, ".pem") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		out = append(out, stateFile{rel: rel, orig: b, mode: info.Mode().Perm(), podFile: strings.HasPrefix(rel, "pods/")})
		return nil
	})
	if err != nil {
		t.Fatalf("walking %s: %v", root, err)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].rel < out[j].rel })
	return out
}

// restore writes every file back as it was when nodelet was first stopped.
func restore(t *testing.T, root string, files []stateFile) {
	t.Helper()
	for _, sf := range files {
		path := filepath.Join(root, sf.rel)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatalf("restoring %s: %v", sf.rel, err)
		}
		if err := os.WriteFile(path, sf.orig, sf.mode); err != nil {
			t.Fatalf("restoring %s: %v", sf.rel, err)
		}
	}
}

var uidRE = regexp.MustCompile(`^pods/[0-9a-f-]{36}/`)

// kindOf names a file's kind: its path with the pod uid and, for the containers' files,
// the last element dropped ("pods/<uid>/containers/main/<id>" → "pods_containers_main").
func kindOf(rel string) string {
	if !uidRE.MatchString(rel) {
		return strings.NewReplacer("/", "_", ".", "_").Replace(rel)
	}
	r := uidRE.ReplaceAllString(rel, "pods/")
	if strings.HasPrefix(r, "pods/containers/") {
		r = filepath.Dir(r)
	}
	return strings.NewReplacer("/", "_", ".", "_").Replace(r)
}

// onePerKind keeps the first file of each kind (the pods' files are alike across pods).
func onePerKind(files []stateFile) []stateFile {
	seen := map[string]bool{}
	var out []stateFile
	for _, sf := range files {
		if k := kindOf(sf.rel); !seen[k] {
			seen[k] = true
			out = append(out, sf)
		}
	}
	return out
}

// tail is the last lines of s.
func tail(s string, lines int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > lines {
		l = l[len(l)-lines:]
	}
	return strings.Join(l, "\n")
}
