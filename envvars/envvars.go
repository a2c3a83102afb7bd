// Package envvars computes a container's environment the way the kubelet does:
// service link variables, envFrom, env (values, configMap and secret refs,
// fieldRef, resourceFieldRef).
//
// It holds the one $(VAR) expander (Expand, ExpandCommand), used for env
// values, a container's command and args, and subPathExpr.
package envvars

import (
	"context"
	"fmt"
	"sort"
	"strings"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
)

// Sources gives access to the API objects a container's environment may
// reference. Missing objects must be reported with an error for which
// apierrors.IsNotFound is true (a nil object with a nil error counts as
// missing too).
type Sources interface {
	ConfigMap(ctx context.Context, namespace, name string) (*v1.ConfigMap, error)
	Secret(ctx context.Context, namespace, name string) (*v1.Secret, error)
	// Services lists the services of a namespace; nil in standalone mode.
	Services(ctx context.Context, namespace string) ([]*v1.Service, error)
}

// PodInfo carries the runtime facts the environment may refer to.
type PodInfo struct {
	PodIPs   []string // pod IPs, primary first
	HostIPs  []string // node IPs, primary first
	NodeName string
	// NodeAllocatable is the fallback for unset limits in resourceFieldRef.
	NodeAllocatable v1.ResourceList
	// MasterServiceNamespace is where the "kubernetes" service lives; "" means "default".
	MasterServiceNamespace string
}

type kv struct{ name, value string }

// env is an ordered set of variables: a later set of an existing name
// replaces its value but keeps its position of first appearance.
type env struct {
	order []string
	vals  map[string]string
}

func (e *env) set(name, value string) {
	if _, ok := e.vals[name]; !ok {
		e.order = append(e.order, name)
	}
	e.vals[name] = value
}

func (e *env) lookup(name string) (string, bool) {
	v, ok := e.vals[name]
	return v, ok
}

// ForContainer returns the environment of container c of pod. The order is:
// service variables (services sorted by name), then envFrom sources in
// order (keys of one source sorted), then env in order; a name defined again
// takes the later value at its first position. A missing required
// configMap, secret or key is an error (the container's
// CreateContainerConfigError); src may be nil in standalone mode, in which
// case there are no service variables and any configMap/secret reference
// is an error unless optional.
func ForContainer(ctx context.Context, pod *v1.Pod, c *v1.Container, src Sources, info PodInfo) ([]*runtimeapi.KeyValue, error) {
	e := &env{vals: make(map[string]string)}

	svcs, err := podServices(ctx, pod, src, info)
	if err != nil {
		return nil, err
	}
	for _, v := range serviceEnv(svcs) {
		e.set(v.name, v.value)
	}

	objs := &objectCache{src: src, ns: pod.Namespace, cms: map[string]*v1.ConfigMap{}, secrets: map[string]*v1.Secret{}}

	for _, from := range c.EnvFrom {
		var data map[string]string
		var what string
		switch {
		case from.ConfigMapRef != nil:
			what = "ConfigMap " + pod.Namespace + "/" + from.ConfigMapRef.Name
			cm, err := objs.configMap(ctx, from.ConfigMapRef.Name, isTrue(from.ConfigMapRef.Optional))
			if err != nil {
				return nil, err
			}
			if cm == nil {
				continue
			}
			data = cm.Data
		case from.SecretRef != nil:
			what = "Secret " + pod.Namespace + "/" + from.SecretRef.Name
			s, err := objs.secret(ctx, from.SecretRef.Name, isTrue(from.SecretRef.Optional))
			if err != nil {
				return nil, err
			}
			if s == nil {
				continue
			}
			data = make(map[string]string, len(s.Data))
			for k, v := range s.Data {
				data[k] = string(v)
			}
		default:
			continue
		}
		var invalid []string
		for _, k := range sortedKeys(data) {
			name := from.Prefix + k
			// A name the runtime cannot represent (empty, '=', control or
			// non-ASCII characters) is skipped rather than corrupting the
			// environment.
			if errs := validation.IsRelaxedEnvVarName(name); len(errs) != 0 {
				invalid = append(invalid, name)
				continue
			}
			e.set(name, data[k])
		}
		if len(invalid) > 0 {
			klog.InfoS("Skipped envFrom keys that are not valid environment variable names",
				"pod", klog.KObj(pod), "container", c.Name, "source", what, "keys", invalid)
		}
	}

	for _, ev := range c.Env {
		val := ev.Value
		switch {
		case val != "":
			val = Expand(val, e.lookup)
		case ev.ValueFrom != nil:
			v, skip, err := valueFrom(ctx, pod, c, ev.ValueFrom, objs, info)
			if err != nil {
				return nil, fmt.Errorf("resolving env var %q: %w", ev.Name, err)
			}
			if skip {
				continue
			}
			val = v
		}
		e.set(ev.Name, val)
	}

	out := make([]*runtimeapi.KeyValue, 0, len(e.order))
	for _, n := range e.order {
		out = append(out, &runtimeapi.KeyValue{Key: n, Value: []byte(e.vals[n])})
	}
	return out, nil
}

func podServices(ctx context.Context, pod *v1.Pod, src Sources, info PodInfo) ([]*v1.Service, error) {
	if src == nil {
		return nil, nil
	}
	masterNS := info.MasterServiceNamespace
	if masterNS == "" {
		masterNS = "default"
	}
	links := pod.Spec.EnableServiceLinks == nil || *pod.Spec.EnableServiceLinks
	master, err := src.Services(ctx, masterNS)
	if err != nil {
		return nil, fmt.Errorf("failed to list services of namespace %q when setting up env vars: %w", masterNS, err)
	}
	var own []*v1.Service
	if links {
		if pod.Namespace == masterNS {
			own = master
		} else if own, err = src.Services(ctx, pod.Namespace); err != nil {
			return nil, fmt.Errorf("failed to list services of namespace %q when setting up env vars: %w", pod.Namespace, err)
		}
	}
	return selectServices(pod.Namespace, masterNS, links, own, master), nil
}

// valueFrom resolves one env var source; skip is true when an optional
// source is missing (the variable is then not set at all).
func valueFrom(ctx context.Context, pod *v1.Pod, c *v1.Container, from *v1.EnvVarSource, objs *objectCache, info PodInfo) (val string, skip bool, err error) {
	switch {
	case from.FieldRef != nil:
		v, err := fieldRefValue(pod, from.FieldRef, info)
		return v, false, err
	case from.ResourceFieldRef != nil:
		v, err := ResourceFieldValue(pod, c, from.ResourceFieldRef, info.NodeAllocatable)
		return v, false, err
	case from.ConfigMapKeyRef != nil:
		ref := from.ConfigMapKeyRef
		optional := isTrue(ref.Optional)
		cm, err := objs.configMap(ctx, ref.Name, optional)
		if err != nil || cm == nil {
			return "", cm == nil && err == nil, err
		}
		v, ok := cm.Data[ref.Key]
		if !ok {
			if optional {
				return "", true, nil
			}
			return "", false, fmt.Errorf("couldn't find key %v in ConfigMap %v/%v", ref.Key, pod.Namespace, ref.Name)
		}
		return v, false, nil
	case from.SecretKeyRef != nil:
		ref := from.SecretKeyRef
		optional := isTrue(ref.Optional)
		s, err := objs.secret(ctx, ref.Name, optional)
		if err != nil || s == nil {
			return "", s == nil && err == nil, err
		}
		v, ok := s.Data[ref.Key]
		if !ok {
			if optional {
				return "", true, nil
			}
			return "", false, fmt.Errorf("couldn't find key %v in Secret %v/%v", ref.Key, pod.Namespace, ref.Name)
		}
		return string(v), false, nil
	case from.FileKeyRef != nil:
		return "", false, fmt.Errorf("fileKeyRef env var sources are not supported")
	}
	return "", false, nil
}

func fieldRefValue(pod *v1.Pod, fs *v1.ObjectFieldSelector, info PodInfo) (string, error) {
	if fs.APIVersion != "" && fs.APIVersion != "v1" {
		return "", fmt.Errorf("unsupported pod version: %s", fs.APIVersion)
	}
	switch fs.FieldPath {
	case "spec.nodeName":
		if pod.Spec.NodeName != "" {
			return pod.Spec.NodeName, nil
		}
		return info.NodeName, nil
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, nil
	case "status.hostIP":
		if len(info.HostIPs) == 0 {
			return "", fmt.Errorf("status.hostIP: the node's IP address is not known yet")
		}
		return info.HostIPs[0], nil
	case "status.hostIPs":
		if len(info.HostIPs) == 0 {
			return "", fmt.Errorf("status.hostIPs: the node's IP addresses are not known yet")
		}
		return strings.Join(info.HostIPs, ","), nil
	case "status.podIP":
		if len(info.PodIPs) == 0 {
			return "", nil
		}
		return info.PodIPs[0], nil
	case "status.podIPs":
		return strings.Join(info.PodIPs, ","), nil
	}
	return MetadataFieldValue(pod, fs.APIVersion, fs.FieldPath)
}

// objectCache fetches each configMap/secret at most once per ForContainer
// call, so one environment sees one version of each object.
type objectCache struct {
	src     Sources
	ns      string
	cms     map[string]*v1.ConfigMap
	secrets map[string]*v1.Secret
}

// configMap returns the named configMap, or nil when it is missing and
// optional.
func (o *objectCache) configMap(ctx context.Context, name string, optional bool) (*v1.ConfigMap, error) {
	if cm, ok := o.cms[name]; ok {
		if cm == nil && !optional {
			return nil, fmt.Errorf("couldn't get configMap %v/%v: %w", o.ns, name, apierrors.NewNotFound(v1.Resource("configmaps"), name))
		}
		return cm, nil
	}
	if o.src == nil {
		if optional {
			return nil, nil
		}
		return nil, fmt.Errorf("couldn't get configMap %v/%v, no API server connection", o.ns, name)
	}
	cm, err := o.src.ConfigMap(ctx, o.ns, name)
	if err == nil && cm == nil {
		err = apierrors.NewNotFound(v1.Resource("configmaps"), name)
	}
	if err != nil {
		if apierrors.IsNotFound(err) && optional {
			o.cms[name] = nil
			return nil, nil
		}
		return nil, fmt.Errorf("couldn't get configMap %v/%v: %w", o.ns, name, err)
	}
	o.cms[name] = cm
	return cm, nil
}

// secret returns the named secret, or nil when it is missing and optional.
func (o *objectCache) secret(ctx context.Context, name string, optional bool) (*v1.Secret, error) {
	if s, ok := o.secrets[name]; ok {
		if s == nil && !optional {
			return nil, fmt.Errorf("couldn't get secret %v/%v: %w", o.ns, name, apierrors.NewNotFound(v1.Resource("secrets"), name))
		}
		return s, nil
	}
	if o.src == nil {
		if optional {
			return nil, nil
		}
		return nil, fmt.Errorf("couldn't get secret %v/%v, no API server connection", o.ns, name)
	}
	s, err := o.src.Secret(ctx, o.ns, name)
	if err == nil && s == nil {
		err = apierrors.NewNotFound(v1.Resource("secrets"), name)
	}
	if err != nil {
		if apierrors.IsNotFound(err) && optional {
			o.secrets[name] = nil
			return nil, nil
		}
		return nil, fmt.Errorf("couldn't get secret %v/%v: %w", o.ns, name, err)
	}
	o.secrets[name] = s
	return s, nil
}

func isTrue(b *bool) bool { return b != nil && *b }

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
