package podconfig

import (
	"context"
	"crypto/md5" //nolint:gosec // a content hash for a stable UID, as upstream; not security
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"sigs.k8s.io/yaml"

	"github.com/nodelet/nodelet/internal/podutil"
)

// DefaultFileCheckFrequency is upstream's fileCheckFrequency default.
const DefaultFileCheckFrequency = 20 * time.Second

// maxManifestSize is the most a static pod file may hold: upstream's
// maxConfigLength (10 MiB). A larger file is refused rather than read.
const maxManifestSize = 10 << 20

// RunFileSource reads static pods from path (a directory, every file in it whose
// name does not start with a dot, as upstream; or a single file) now, whenever
// inotify reports a change under it, and every period, until ctx is done. A file
// holds a v1 Pod or a v1 PodList. It blocks; run it in its own goroutine.
//
// As upstream, a file written in place is read at each write it reports: write
// manifests by rename (kubeadm does) so no half-written file is read.
func (c *Config) RunFileSource(ctx context.Context, path string, period time.Duration) {
	if period <= 0 {
		period = DefaultFileCheckFrequency
	}
	c.registerSource(podutil.SourceFile)
	fw := newFileWatch(ctx, path)
	defer fw.close()
	read := func() {
		fw.ensure(ctx)
		c.readFileSource(ctx, path)
	}
	read()
	t := c.clk.NewTimer(period)
	defer t.Stop()
	logger := klog.FromContext(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			read()
			t.Reset(period)
		case ev, ok := <-fw.events():
			if !ok {
				return
			}
			if !fw.relevant(ev) {
				continue
			}
			// One read covers a burst (create, write, chmod of one file).
			drainEvents(fw.events())
			logger.V(4).Info("Static pod path changed", "event", ev.String())
			read()
		case err, ok := <-fw.errs():
			if !ok {
				return
			}
			if isOverflow(err) {
				read()
				continue
			}
			logger.Error(err, "Watching the static pod path", "path", path)
		}
	}
}

// poll runs check now and then period after each run ends, until ctx is done.
func (c *Config) poll(ctx context.Context, period time.Duration, check func()) {
	check()
	t := c.clk.NewTimer(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			check()
			t.Reset(period)
		}
	}
}

func (c *Config) readFileSource(ctx context.Context, path string) {
	logger := klog.FromContext(ctx)
	pods, err := c.loadStaticPods(ctx, path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			// As upstream: a missing path is an empty source, so the node still becomes ready.
			logger.V(2).Info("Static pod path does not exist, no static pods", "path", path)
			pods = nil
		} else {
			// Keep the previous snapshot: an unreadable directory must not remove pods.
			logger.Error(err, "Unable to read static pod path", "path", path)
			return
		}
	}
	c.adoptStatic(ctx, podutil.SourceFile, pods)
	c.setSnapshot(podutil.SourceFile, pods)
}

// loadStaticPods reads every manifest under path. Bad manifests are logged and skipped.
func (c *Config) loadStaticPods(ctx context.Context, path string) ([]*v1.Pod, error) {
	logger := klog.FromContext(ctx)
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("stat static pod path %q: %w", path, err)
	}
	var files []string
	if fi.IsDir() {
		entries, err := os.ReadDir(path)
		if err != nil {
			return nil, fmt.Errorf("list static pod directory %q: %w", path, err)
		}
		// ReadDir sorts by name, so the first of two files defining one pod wins.
		for _, e := range entries {
			// Upstream globs "[^.]*": hidden files (editor swap files, ...) are ignored.
			if !strings.HasPrefix(e.Name(), ".") {
				files = append(files, filepath.Join(path, e.Name()))
			}
		}
	} else if fi.Mode().IsRegular() {
		files = []string{path}
	} else {
		// An error keeps the previous snapshot, as upstream.
		return nil, fmt.Errorf("static pod path %q is neither a directory nor a regular file (mode %s)", path, fi.Mode())
	}

	var pods []*v1.Pod
	byName := map[string]string{}
	for _, f := range files {
		filePods, err := c.loadStaticPodFile(f)
		switch {
		case errors.Is(err, errIsDir):
			logger.V(4).Info("Not recursing into static pod subdirectory", "path", f)
			continue
		case err != nil:
			logger.Error(err, "Skipping static pod manifest", "file", f)
			continue
		}
		for _, pod := range filePods {
			if other, dup := byName[fullName(pod)]; dup {
				logger.Error(nil, "Skipping static pod: a pod with the same name is already defined", "file", f, "pod", klog.KObj(pod), "definedIn", other)
				continue
			}
			byName[fullName(pod)] = f
			pods = append(pods, pod)
		}
	}
	return pods, nil
}

// loadStaticPodFile reads one manifest and decodes, defaults and validates its pods.
func (c *Config) loadStaticPodFile(file string) ([]*v1.Pod, error) {
	data, err := readManifest(file)
	if err != nil {
		return nil, err
	}
	return decodeManifest(data, file, c.nodeName)
}

var errIsDir = errors.New("is a directory")

// readManifest reads file, following symlinks as upstream does, but only if it
// is a regular file of at most maxManifestSize bytes: a FIFO would block the
// source forever and /dev/zero would fill the memory. Opening a device can
// itself have effects, so the type is checked before open; O_NONBLOCK keeps a
// FIFO swapped in after that check from blocking the open, and the type of what
// was opened is checked again before reading.
func readManifest(file string) ([]byte, error) {
	fi, err := os.Stat(file)
	if err != nil {
		return nil, fmt.Errorf("stat manifest: %w", err)
	}
	if err := checkManifestFile(fi); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(file, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, fmt.Errorf("open manifest: %w", err)
	}
	defer f.Close()
	fi, err = f.Stat()
	if err != nil {
		return nil, fmt.Errorf("stat opened manifest: %w", err)
	}
	if err := checkManifestFile(fi); err != nil {
		return nil, err
	}
	// The size can change after fstat: the limited read is what bounds memory.
	data, err := io.ReadAll(io.LimitReader(f, maxManifestSize+1))
	if err != nil {
		return nil, fmt.Errorf("read manifest: %w", err)
	}
	if len(data) > maxManifestSize {
		return nil, fmt.Errorf("manifest is larger than the static pod file limit of %d bytes", maxManifestSize)
	}
	return data, nil
}

func checkManifestFile(fi fs.FileInfo) error {
	switch {
	case fi.IsDir():
		return errIsDir
	case !fi.Mode().IsRegular():
		return fmt.Errorf("manifest is not a regular file (mode %s): not read", fi.Mode())
	case fi.Size() > maxManifestSize:
		return fmt.Errorf("manifest is %d bytes, larger than the static pod file limit of %d bytes", fi.Size(), maxManifestSize)
	}
	return nil
}

// typeMeta is the apiVersion and kind of a manifest or of a PodList item.
type typeMeta struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
}

// origin is where a manifest came from: the source's name and, for the UID, the
// file path ("file:<path>") or URL ("url:<url>").
type origin struct {
	source, id string
}

func fileOrigin(file string) origin { return origin{source: podutil.SourceFile, id: "file:" + file} }

// decodeManifest turns manifest bytes from file into the pods to run on nodeName:
// one for a v1 Pod, one per item for a v1 PodList. Any bad pod refuses the whole
// file.
func decodeManifest(data []byte, file, nodeName string) ([]*v1.Pod, error) {
	return decodeManifestFrom(data, fileOrigin(file), nodeName)
}

// decodeManifestFrom is decodeManifest for a manifest from any static source.
func decodeManifestFrom(data []byte, from origin, nodeName string) ([]*v1.Pod, error) {
	if len(strings.TrimSpace(string(data))) == 0 {
		return nil, errors.New("manifest is empty")
	}
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, fmt.Errorf("parse manifest as YAML or JSON: %w", err)
	}
	var tm typeMeta
	if err := json.Unmarshal(js, &tm); err != nil {
		return nil, fmt.Errorf("manifest is not an object: %w", err)
	}
	if tm.Kind != "Pod" && tm.Kind != "PodList" {
		return nil, fmt.Errorf("kind is %q, want Pod or PodList", tm.Kind)
	}
	if tm.APIVersion != "v1" {
		return nil, fmt.Errorf("apiVersion is %q, want v1", tm.APIVersion)
	}
	if tm.Kind == "Pod" {
		// The UID hashes the file's bytes, so it stays what earlier versions gave.
		pod, err := decodePod(js, staticPodUID(data, nodeName, from), nodeName, from.source)
		if err != nil {
			return nil, err
		}
		return []*v1.Pod{pod}, nil
	}
	var list struct {
		Items []json.RawMessage `json:"items"`
	}
	if err := json.Unmarshal(js, &list); err != nil {
		return nil, fmt.Errorf("decode pod list: %w", err)
	}
	pods := make([]*v1.Pod, 0, len(list.Items))
	for i, item := range list.Items {
		var itm typeMeta
		if err := json.Unmarshal(item, &itm); err != nil {
			return nil, fmt.Errorf("items[%d] is not an object: %w", i, err)
		}
		// Items of a PodList may leave out their type; if given it must be a v1 Pod.
		if (itm.Kind != "" && itm.Kind != "Pod") || (itm.APIVersion != "" && itm.APIVersion != "v1") {
			return nil, fmt.Errorf("items[%d] is %s %s, want a v1 Pod", i, itm.APIVersion, itm.Kind)
		}
		// Each item's UID hashes that item only: editing one pod of the list
		// does not restart the others.
		pod, err := decodePod(item, staticPodUID(item, nodeName, from), nodeName, from.source)
		if err != nil {
			return nil, fmt.Errorf("items[%d]: %w", i, err)
		}
		pods = append(pods, pod)
	}
	return pods, nil
}

// decodePod turns one pod's JSON from source into a pod with uid, ready to run on
// nodeName.
func decodePod(js []byte, uid types.UID, nodeName, source string) (*v1.Pod, error) {
	pod := &v1.Pod{}
	if err := json.Unmarshal(js, pod); err != nil {
		return nil, fmt.Errorf("decode pod: %w", err)
	}
	if pod.Name == "" {
		return nil, errors.New("metadata.name is missing")
	}
	if err := checkNoAPIReferences(pod); err != nil {
		return nil, err
	}

	if pod.Namespace == "" {
		pod.Namespace = v1.NamespaceDefault
	}
	// Lower case, as upstream names static pods: the same name under either agent.
	pod.Name = pod.Name + "-" + strings.ToLower(nodeName)
	pod.Spec.NodeName = nodeName
	pod.UID = uid
	pod.ResourceVersion = ""
	pod.Status = v1.PodStatus{Phase: v1.PodPending}
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Annotations[podutil.AnnotationConfigHash] = string(uid)
	pod.Annotations[podutil.AnnotationConfigSource] = source
	applyPodDefaults(pod)
	if source == podutil.SourceFile {
		// Upstream gives only file pods this toleration; HTTP pods go without it.
		addNoExecuteToleration(pod)
	}

	if err := validateStaticPod(pod); err != nil {
		return nil, err
	}
	return pod, nil
}

// staticPodUID is stable across restarts: the same bytes from the same file (or URL)
// on the same node always give the same UID; any edit gives a new one (a new pod), as
// upstream.
func staticPodUID(data []byte, nodeName string, from origin) types.UID {
	h := md5.New() //nolint:gosec // see import
	// For a file this is "host:<node>\x00file:<path>\x00", the bytes earlier versions
	// hashed, so file pods keep their UIDs.
	fmt.Fprintf(h, "host:%s\x00%s\x00", nodeName, from.id)
	h.Write(data)
	return types.UID(hex.EncodeToString(h.Sum(nil)))
}

// addNoExecuteToleration lets static pods survive NoExecute taints, as upstream does.
func addNoExecuteToleration(pod *v1.Pod) {
	for _, t := range pod.Spec.Tolerations {
		if t.Key == "" && t.Operator == v1.TolerationOpExists && t.Effect == v1.TaintEffectNoExecute {
			return
		}
	}
	pod.Spec.Tolerations = append(pod.Spec.Tolerations, v1.Toleration{
		Operator: v1.TolerationOpExists,
		Effect:   v1.TaintEffectNoExecute,
	})
}
