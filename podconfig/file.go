package podconfig

import (
	"context"
	"crypto/md5" //nolint:gosec // a content hash for a stable UID, as upstream; not security
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"sigs.k8s.io/yaml"
)

// DefaultFileCheckFrequency is upstream's fileCheckFrequency default.
const DefaultFileCheckFrequency = 20 * time.Second

// RunFileSource reads static pods from path (a directory of *.yaml, *.yml and *.json
// files, one pod each, hidden files ignored; or a single file) now and every period,
// until ctx is done. It blocks; run it in its own goroutine. Polling only (no inotify):
// a change is seen within one period.
func (c *Config) RunFileSource(ctx context.Context, path string, period time.Duration) {
	if period <= 0 {
		period = DefaultFileCheckFrequency
	}
	c.registerSource(SourceFile)
	c.readFileSource(path)
	t := c.clk.NewTimer(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			c.readFileSource(path)
			t.Reset(period)
		}
	}
}

func (c *Config) readFileSource(path string) {
	pods, err := c.loadStaticPods(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			// As upstream: a missing path is an empty source, so the node still becomes ready.
			klog.V(2).InfoS("Static pod path does not exist, no static pods", "path", path)
			pods = nil
		} else {
			// Keep the previous snapshot: an unreadable directory must not remove pods.
			klog.ErrorS(err, "Unable to read static pod path", "path", path)
			return
		}
	}
	c.setSnapshot(SourceFile, pods)
}

// loadStaticPods reads every manifest under path. Bad manifests are logged and skipped.
func (c *Config) loadStaticPods(path string) ([]*v1.Pod, error) {
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
		for _, e := range entries {
			name := e.Name()
			if strings.HasPrefix(name, ".") {
				continue
			}
			if e.IsDir() {
				klog.V(4).InfoS("Not recursing into static pod subdirectory", "path", filepath.Join(path, name))
				continue
			}
			switch strings.ToLower(filepath.Ext(name)) {
			case ".yaml", ".yml", ".json":
				files = append(files, filepath.Join(path, name))
			default:
				klog.V(4).InfoS("Ignoring non-manifest file in static pod directory", "path", filepath.Join(path, name))
			}
		}
		sort.Strings(files)
	} else {
		files = []string{path}
	}

	var pods []*v1.Pod
	byName := map[string]string{}
	for _, f := range files {
		pod, err := c.loadStaticPodFile(f)
		if err != nil {
			klog.ErrorS(err, "Skipping static pod manifest", "file", f)
			continue
		}
		if other, dup := byName[fullName(pod)]; dup {
			klog.ErrorS(nil, "Skipping static pod manifest: a pod with the same name is already defined", "file", f, "pod", klog.KObj(pod), "definedIn", other)
			continue
		}
		byName[fullName(pod)] = f
		pods = append(pods, pod)
	}
	return pods, nil
}

// loadStaticPodFile decodes, defaults and validates one manifest.
func (c *Config) loadStaticPodFile(file string) (*v1.Pod, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("read manifest: %w", err)
	}
	return decodeStaticPod(data, file, c.nodeName)
}

// decodeStaticPod turns manifest bytes from file into a pod ready to run on nodeName.
func decodeStaticPod(data []byte, file, nodeName string) (*v1.Pod, error) {
	if len(strings.TrimSpace(string(data))) == 0 {
		return nil, errors.New("manifest is empty")
	}
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, fmt.Errorf("parse manifest as YAML or JSON: %w", err)
	}
	var tm struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	if err := json.Unmarshal(js, &tm); err != nil {
		return nil, fmt.Errorf("manifest is not an object: %w", err)
	}
	if tm.Kind != "Pod" {
		return nil, fmt.Errorf("kind is %q, want Pod", tm.Kind)
	}
	if tm.APIVersion != "v1" {
		return nil, fmt.Errorf("apiVersion is %q, want v1", tm.APIVersion)
	}
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
	pod.Name = pod.Name + "-" + nodeName
	pod.Spec.NodeName = nodeName
	uid := staticPodUID(data, nodeName, file)
	pod.UID = uid
	pod.ResourceVersion = ""
	pod.Status = v1.PodStatus{Phase: v1.PodPending}
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Annotations[AnnotationConfigHash] = string(uid)
	pod.Annotations[AnnotationConfigSource] = SourceFile
	applyPodDefaults(pod)
	addNoExecuteToleration(pod)

	if err := validateStaticPod(pod); err != nil {
		return nil, err
	}
	return pod, nil
}

// staticPodUID is stable across restarts: the same bytes in the same file on the same
// node always give the same UID; any edit gives a new one (a new pod), as upstream.
func staticPodUID(data []byte, nodeName, file string) types.UID {
	h := md5.New() //nolint:gosec // see import
	fmt.Fprintf(h, "host:%s\x00file:%s\x00", nodeName, file)
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
