package podruntime

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/envvars"
	"github.com/nodelet/nodelet/internal/safepath"
	"github.com/nodelet/nodelet/volumes"
)

// subPathOf returns the volumeMount's subPath, or its subPathExpr expanded
// over the container's environment, checked as upstream checks it: relative,
// without a ".." element. "" means the whole volume.
func subPathOf(vm *v1.VolumeMount, envs []*runtimeapi.KeyValue) (string, error) {
	sub := vm.SubPath
	if vm.SubPathExpr != "" {
		var err error
		if sub, err = expandSubPathExpr(vm.SubPathExpr, envs); err != nil {
			return "", err
		}
	}
	switch err := safepath.CheckRelative(sub); {
	case errors.Is(err, safepath.ErrAbsolute):
		return "", fmt.Errorf("error SubPath `%s` must not be an absolute path", sub)
	case err != nil:
		return "", fmt.Errorf("unable to provision SubPath `%s`: %w", sub, err)
	}
	return sub, nil
}

// expandSubPathExpr expands $(VAR) references as upstream does for
// subPathExpr: like command and args ($$ escapes, $VAR and ${VAR} stay as
// written), except that a variable that is unset or empty is an error
// rather than kept literally, so replicas never share a directory named
// after an unexpanded reference.
func expandSubPathExpr(expr string, envs []*runtimeapi.KeyValue) (string, error) {
	values := make(map[string]string, len(envs))
	for _, kv := range envs {
		values[kv.GetKey()] = string(kv.GetValue())
	}
	var missing []string
	out := envvars.Expand(expr, func(name string) (string, bool) {
		v := values[name]
		if v == "" {
			missing = append(missing, name)
		}
		return v, true
	})
	if len(missing) > 0 {
		slices.Sort(missing)
		return "", fmt.Errorf("missing value for %s", strings.Join(slices.Compact(missing), ", "))
	}
	return out, nil
}

// subPathError is what users see of a sub path that could not be prepared:
// upstream's message, without the host paths the wrapped error names.
type subPathError struct {
	msg string
	err error
}

func (e *subPathError) Error() string { return e.msg }
func (e *subPathError) Unwrap() error { return e.err }

// prepareSubPath has the volumes manager bind-mount the sub path where the
// runtime can take it without following anything the pod planted, and
// returns that path.
func (m *Manager) prepareSubPath(ctx context.Context, pod *v1.Pod, c *v1.Container, index int, hv volumes.HostVolume, sub string) (string, error) {
	vm := &c.VolumeMounts[index]
	p, err := m.deps.Volumes.PrepareSubPath(ctx, pod, hv, volumes.SubPath{Volume: vm.Name, Container: c.Name, Index: index, Path: sub})
	if err == nil {
		return p, nil
	}
	logger := klog.FromContext(ctx)
	var se *volumes.SubPathError
	if errors.As(err, &se) && se.Create {
		logger.Error(err, "Failed to create subPath directory for volumeMount of the container", "pod", klog.KObj(pod), "containerName", c.Name, "volumeMountName", vm.Name)
		return "", &subPathError{msg: fmt.Sprintf("failed to create subPath directory for volumeMount %q of container %q", vm.Name, c.Name), err: err}
	}
	logger.Error(err, "Failed to prepare subPath for volumeMount of the container", "pod", klog.KObj(pod), "containerName", c.Name, "volumeMountName", vm.Name)
	return "", &subPathError{msg: fmt.Sprintf("failed to prepare subPath for volumeMount %q of container %q", vm.Name, c.Name), err: err}
}
