package envvars

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
)

// FormatMap renders labels or annotations the way the downward API does:
// one `key="value"` line per entry (value Go-quoted), sorted by key, no
// trailing newline.
func FormatMap(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b []byte
	for i, k := range keys {
		if i > 0 {
			b = append(b, '\n')
		}
		b = append(b, k...)
		b = append(b, '=')
		b = strconv.AppendQuote(b, m[k])
	}
	return string(b)
}

// MetadataFieldValue resolves the pod-metadata field paths that both env
// vars and downwardAPI volumes accept: metadata.name, metadata.namespace,
// metadata.uid, metadata.labels, metadata.annotations and the subscripted
// metadata.labels['key'] / metadata.annotations['key'].
func MetadataFieldValue(pod *v1.Pod, apiVersion, fieldPath string) (string, error) {
	if apiVersion != "" && apiVersion != "v1" {
		return "", fmt.Errorf("unsupported pod version: %s", apiVersion)
	}
	if path, subscript, ok := splitSubscript(fieldPath); ok {
		switch path {
		case "metadata.annotations":
			if errs := validation.IsQualifiedName(strings.ToLower(subscript)); len(errs) != 0 {
				return "", fmt.Errorf("invalid key subscript in %s: %s", fieldPath, strings.Join(errs, ";"))
			}
			return pod.Annotations[subscript], nil
		case "metadata.labels":
			if errs := validation.IsQualifiedName(subscript); len(errs) != 0 {
				return "", fmt.Errorf("invalid key subscript in %s: %s", fieldPath, strings.Join(errs, ";"))
			}
			return pod.Labels[subscript], nil
		default:
			return "", fmt.Errorf("fieldPath %q does not support subscript", fieldPath)
		}
	}
	switch fieldPath {
	case "metadata.name":
		return pod.Name, nil
	case "metadata.namespace":
		return pod.Namespace, nil
	case "metadata.uid":
		return string(pod.UID), nil
	case "metadata.labels":
		return FormatMap(pod.Labels), nil
	case "metadata.annotations":
		return FormatMap(pod.Annotations), nil
	}
	return "", fmt.Errorf("unsupported fieldPath: %v", fieldPath)
}

// splitSubscript splits `path['key']` into path and key.
func splitSubscript(fieldPath string) (string, string, bool) {
	if !strings.HasSuffix(fieldPath, "']") {
		return fieldPath, "", false
	}
	s := strings.TrimSuffix(fieldPath, "']")
	parts := strings.SplitN(s, "['", 2)
	if len(parts) < 2 || len(parts[0]) == 0 || len(parts[1]) == 0 {
		return fieldPath, "", false
	}
	return parts[0], parts[1], true
}

// ResourceFieldValue resolves a resourceFieldRef. The container is the one
// named by fs.ContainerName (app containers first, then init containers), or
// self when ContainerName is empty. Unset (or zero) cpu, memory and
// ephemeral-storage limits fall back to the pod-level limits when the pod
// sets them, then to nodeAllocatable, as the upstream kubelet does.
func ResourceFieldValue(pod *v1.Pod, self *v1.Container, fs *v1.ResourceFieldSelector, nodeAllocatable v1.ResourceList) (string, error) {
	c := self
	if fs.ContainerName != "" {
		c = findContainer(pod, fs.ContainerName)
		if c == nil {
			return "", fmt.Errorf("container %s not found", fs.ContainerName)
		}
	}
	if c == nil {
		return "", fmt.Errorf("resourceFieldRef %q names no container", fs.Resource)
	}
	limits := effectiveLimits(pod, c, nodeAllocatable)

	divisor := fs.Divisor
	if divisor.IsZero() {
		divisor = resource.MustParse("1")
	}
	var q resource.Quantity
	kind, name, ok := strings.Cut(fs.Resource, ".")
	if !ok {
		return "", fmt.Errorf("unsupported container resource : %v", fs.Resource)
	}
	var list v1.ResourceList
	switch kind {
	case "limits":
		list = limits
	case "requests":
		list = c.Resources.Requests
	default:
		return "", fmt.Errorf("unsupported container resource : %v", fs.Resource)
	}
	rn := v1.ResourceName(name)
	switch {
	case rn == v1.ResourceCPU:
		q = list[rn]
		return strconv.FormatInt(int64(math.Ceil(float64(q.MilliValue())/float64(divisor.MilliValue()))), 10), nil
	case rn == v1.ResourceMemory, rn == v1.ResourceEphemeralStorage,
		strings.HasPrefix(name, v1.ResourceHugePagesPrefix):
		q = list[rn]
		return strconv.FormatInt(int64(math.Ceil(float64(q.Value())/float64(divisor.Value()))), 10), nil
	}
	return "", fmt.Errorf("unsupported container resource : %v", fs.Resource)
}

func findContainer(pod *v1.Pod, name string) *v1.Container {
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Name == name {
			return &pod.Spec.Containers[i]
		}
	}
	for i := range pod.Spec.InitContainers {
		if pod.Spec.InitContainers[i].Name == name {
			return &pod.Spec.InitContainers[i]
		}
	}
	return nil
}

// effectiveLimits returns c's limits with unset cpu/memory/ephemeral-storage
// filled from the pod-level limits, else from node allocatable. Hugepages
// are never defaulted (they are never overcommitted).
func effectiveLimits(pod *v1.Pod, c *v1.Container, nodeAllocatable v1.ResourceList) v1.ResourceList {
	out := make(v1.ResourceList, len(c.Resources.Limits)+3)
	for k, v := range c.Resources.Limits {
		out[k] = v.DeepCopy()
	}
	for _, rn := range []v1.ResourceName{v1.ResourceCPU, v1.ResourceMemory, v1.ResourceEphemeralStorage} {
		if q, ok := out[rn]; ok && !q.IsZero() {
			continue
		}
		if pod.Spec.Resources != nil && rn != v1.ResourceEphemeralStorage {
			// Pod-level resources support cpu and memory only.
			if q, ok := pod.Spec.Resources.Limits[rn]; ok && !q.IsZero() {
				out[rn] = q.DeepCopy()
				continue
			}
		}
		if q, ok := nodeAllocatable[rn]; ok {
			out[rn] = q.DeepCopy()
		}
	}
	return out
}
