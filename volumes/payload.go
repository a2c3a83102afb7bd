package volumes

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/nodelet/nodelet/envvars"
)

// getConfigMap returns the configMap, or nil when it is missing and
// optional. A missing required one is `configmap "x" not found`, the
// upstream FailedMount wording.
func (m *Manager) getConfigMap(ctx context.Context, ns, name string, optional bool) (*v1.ConfigMap, error) {
	if m.kube == nil {
		if optional {
			return nil, nil
		}
		return nil, fmt.Errorf("cannot get configmap %s/%s: no API server connection (standalone mode)", ns, name)
	}
	cm, err := m.kube.GetConfigMap(ctx, ns, name)
	if err == nil && cm == nil {
		err = apierrors.NewNotFound(v1.Resource("configmaps"), name)
	}
	if apierrors.IsNotFound(err) {
		if optional {
			return nil, nil
		}
		return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "configmap"}, name)
	}
	if err != nil {
		return nil, fmt.Errorf("getting configmap %s/%s: %w", ns, name, err)
	}
	return cm, nil
}

// getSecret is getConfigMap for secrets.
func (m *Manager) getSecret(ctx context.Context, ns, name string, optional bool) (*v1.Secret, error) {
	if m.kube == nil {
		if optional {
			return nil, nil
		}
		return nil, fmt.Errorf("cannot get secret %s/%s: no API server connection (standalone mode)", ns, name)
	}
	s, err := m.kube.GetSecret(ctx, ns, name)
	if err == nil && s == nil {
		err = apierrors.NewNotFound(v1.Resource("secrets"), name)
	}
	if apierrors.IsNotFound(err) {
		if optional {
			return nil, nil
		}
		return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "secret"}, name)
	}
	if err != nil {
		return nil, fmt.Errorf("getting secret %s/%s: %w", ns, name, err)
	}
	return s, nil
}

func (m *Manager) configMapPayload(ctx context.Context, ns, name string, items []v1.KeyToPath, defaultMode int32, optional bool) (map[string]fileProjection, error) {
	cm, err := m.getConfigMap(ctx, ns, name, optional)
	if err != nil {
		return nil, err
	}
	payload := map[string]fileProjection{}
	if cm == nil {
		return payload, nil
	}
	err = project(payload, items, defaultMode, optional, func(k string) ([]byte, bool) {
		if v, ok := cm.Data[k]; ok {
			return []byte(v), true
		}
		v, ok := cm.BinaryData[k]
		return v, ok
	}, allKeys(cm.Data, cm.BinaryData), "configmap references non-existent config key: %s")
	return payload, err
}

func (m *Manager) secretPayload(ctx context.Context, ns, name string, items []v1.KeyToPath, defaultMode int32, optional bool) (map[string]fileProjection, error) {
	s, err := m.getSecret(ctx, ns, name, optional)
	if err != nil {
		return nil, err
	}
	payload := map[string]fileProjection{}
	if s == nil {
		return payload, nil
	}
	err = project(payload, items, defaultMode, optional, func(k string) ([]byte, bool) {
		v, ok := s.Data[k]
		return v, ok
	}, allKeys(nil, s.Data), "references non-existent secret key: %s")
	return payload, err
}

// project adds keys to payload: all keys when items is empty, else the
// listed ones at their paths (a missing listed key fails unless optional).
func project(payload map[string]fileProjection, items []v1.KeyToPath, defaultMode int32, optional bool,
	get func(string) ([]byte, bool), all []string, missingFmt string) error {
	if len(items) == 0 {
		for _, k := range all {
			v, _ := get(k)
			payload[k] = fileProjection{Data: v, Mode: defaultMode}
		}
		return nil
	}
	for _, it := range items {
		v, ok := get(it.Key)
		if !ok {
			if optional {
				continue
			}
			return fmt.Errorf(missingFmt, it.Key)
		}
		payload[it.Path] = fileProjection{Data: v, Mode: modeOr(it.Mode, defaultMode)}
	}
	return nil
}

func allKeys(s map[string]string, b map[string][]byte) []string {
	keys := make([]string, 0, len(s)+len(b))
	for k := range s {
		keys = append(keys, k)
	}
	for k := range b {
		keys = append(keys, k)
	}
	return keys
}

func (m *Manager) downwardAPIPayload(pod *v1.Pod, items []v1.DownwardAPIVolumeFile, defaultMode int32) (map[string]fileProjection, error) {
	payload := map[string]fileProjection{}
	if err := m.addDownwardAPI(payload, pod, items, defaultMode); err != nil {
		return nil, err
	}
	return payload, nil
}

func (m *Manager) addDownwardAPI(payload map[string]fileProjection, pod *v1.Pod, items []v1.DownwardAPIVolumeFile, defaultMode int32) error {
	for _, it := range items {
		var val string
		var err error
		switch {
		case it.FieldRef != nil:
			val, err = envvars.MetadataFieldValue(pod, it.FieldRef.APIVersion, it.FieldRef.FieldPath)
		case it.ResourceFieldRef != nil:
			if it.ResourceFieldRef.ContainerName == "" {
				err = fmt.Errorf("resourceFieldRef %q needs a containerName in a volume", it.ResourceFieldRef.Resource)
				break
			}
			val, err = envvars.ResourceFieldValue(pod, nil, it.ResourceFieldRef, m.allocatable())
		default:
			err = fmt.Errorf("downwardAPI item %q has neither fieldRef nor resourceFieldRef", it.Path)
		}
		if err != nil {
			return fmt.Errorf("downwardAPI item %q: %w", it.Path, err)
		}
		payload[it.Path] = fileProjection{Data: []byte(val), Mode: modeOr(it.Mode, defaultMode)}
	}
	return nil
}

func (m *Manager) projectedPayload(ctx context.Context, pod *v1.Pod, volName string, p *v1.ProjectedVolumeSource, st *podState) (map[string]fileProjection, error) {
	defaultMode := modeOr(p.DefaultMode, v1.ProjectedVolumeSourceDefaultMode)
	payload := map[string]fileProjection{}
	for i, src := range p.Sources {
		switch {
		case src.ConfigMap != nil:
			part, err := m.configMapPayload(ctx, pod.Namespace, src.ConfigMap.Name, src.ConfigMap.Items, defaultMode, isTrue(src.ConfigMap.Optional))
			if err != nil {
				return nil, err
			}
			merge(payload, part)
		case src.Secret != nil:
			part, err := m.secretPayload(ctx, pod.Namespace, src.Secret.Name, src.Secret.Items, defaultMode, isTrue(src.Secret.Optional))
			if err != nil {
				return nil, err
			}
			merge(payload, part)
		case src.DownwardAPI != nil:
			if err := m.addDownwardAPI(payload, pod, src.DownwardAPI.Items, defaultMode); err != nil {
				return nil, err
			}
		case src.ServiceAccountToken != nil:
			tok, err := m.serviceAccountToken(ctx, pod, volName, src.ServiceAccountToken, st)
			if err != nil {
				return nil, err
			}
			// Upstream: the token is 0600, owned by the pods' common user
			// when there is one; with an fsGroup the group pass adds 0440.
			mode, user := defaultMode, fsUserOf(pod)
			if user != nil || fsGroupOf(pod) != nil {
				mode = 0o600
			}
			payload[src.ServiceAccountToken.Path] = fileProjection{Data: []byte(tok), Mode: mode, FsUser: user}
		case src.ClusterTrustBundle != nil:
			return nil, fmt.Errorf("projected source %d: clusterTrustBundle is not supported by this node agent", i)
		case src.PodCertificate != nil:
			return nil, fmt.Errorf("projected source %d: podCertificate is not supported by this node agent", i)
		default:
			return nil, fmt.Errorf("projected source %d: no known source set", i)
		}
	}
	return payload, nil
}

func merge(dst, src map[string]fileProjection) {
	for k, v := range src {
		dst[k] = v
	}
}
