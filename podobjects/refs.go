package podobjects

import (
	v1 "k8s.io/api/core/v1"
)

// Kind is the kind of object a pod references.
type Kind string

// The kinds the manager serves.
const (
	ConfigMap Kind = "configmap"
	Secret    Kind = "secret"
)

// Key names one object.
type Key struct {
	Kind      Kind
	Namespace string
	Name      string
}

// References lists the configMaps and secrets pod references: volumes (plain
// and projected), env and envFrom of every container, and imagePullSecrets,
// the objects upstream's managers register for a pod.
func References(pod *v1.Pod) map[Key]bool {
	out := map[Key]bool{}
	add := func(k Kind, name string) {
		if name != "" {
			out[Key{Kind: k, Namespace: pod.Namespace, Name: name}] = true
		}
	}
	for _, s := range pod.Spec.ImagePullSecrets {
		add(Secret, s.Name)
	}
	for i := range pod.Spec.Volumes {
		src := &pod.Spec.Volumes[i].VolumeSource
		switch {
		case src.ConfigMap != nil:
			add(ConfigMap, src.ConfigMap.Name)
		case src.Secret != nil:
			add(Secret, src.Secret.SecretName)
		case src.Projected != nil:
			for _, p := range src.Projected.Sources {
				if p.ConfigMap != nil {
					add(ConfigMap, p.ConfigMap.Name)
				}
				if p.Secret != nil {
					add(Secret, p.Secret.Name)
				}
			}
		}
	}
	visit := func(env []v1.EnvVar, from []v1.EnvFromSource) {
		for _, e := range env {
			if e.ValueFrom == nil {
				continue
			}
			if r := e.ValueFrom.ConfigMapKeyRef; r != nil {
				add(ConfigMap, r.Name)
			}
			if r := e.ValueFrom.SecretKeyRef; r != nil {
				add(Secret, r.Name)
			}
		}
		for _, f := range from {
			if f.ConfigMapRef != nil {
				add(ConfigMap, f.ConfigMapRef.Name)
			}
			if f.SecretRef != nil {
				add(Secret, f.SecretRef.Name)
			}
		}
	}
	for _, c := range pod.Spec.InitContainers {
		visit(c.Env, c.EnvFrom)
	}
	for _, c := range pod.Spec.Containers {
		visit(c.Env, c.EnvFrom)
	}
	for _, c := range pod.Spec.EphemeralContainers {
		visit(c.Env, c.EnvFrom)
	}
	return out
}
