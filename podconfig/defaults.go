package podconfig

import (
	"errors"
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/nodelet/nodelet/internal/podutil"
)

// Values the API server's defaulting gives a v1 Pod. Static pods never pass through the
// API server, so the node applies the same defaults itself (upstream does the same).
const (
	defaultTerminationGracePeriodSeconds int64 = 30
	defaultTerminationMessagePath              = "/dev/termination-log"
	defaultSchedulerName                       = "default-scheduler"
	defaultVolumeMode                    int32 = 0o644
	defaultProbeTimeoutSeconds           int32 = 1
	defaultProbePeriodSeconds            int32 = 10
	defaultProbeSuccessThreshold         int32 = 1
	defaultProbeFailureThreshold         int32 = 3
)

func applyPodDefaults(pod *v1.Pod) {
	spec := &pod.Spec
	if spec.RestartPolicy == "" {
		spec.RestartPolicy = v1.RestartPolicyAlways
	}
	if spec.DNSPolicy == "" {
		spec.DNSPolicy = v1.DNSClusterFirst
	}
	if spec.TerminationGracePeriodSeconds == nil {
		g := defaultTerminationGracePeriodSeconds
		spec.TerminationGracePeriodSeconds = &g
	}
	if spec.SchedulerName == "" {
		spec.SchedulerName = defaultSchedulerName
	}
	if spec.SecurityContext == nil {
		spec.SecurityContext = &v1.PodSecurityContext{}
	}
	if spec.EnableServiceLinks == nil {
		t := true
		spec.EnableServiceLinks = &t
	}
	for i := range spec.InitContainers {
		defaultContainer(&spec.InitContainers[i], spec.HostNetwork)
	}
	for i := range spec.Containers {
		defaultContainer(&spec.Containers[i], spec.HostNetwork)
	}
	for i := range spec.Volumes {
		defaultVolume(&spec.Volumes[i])
	}
}

func defaultContainer(c *v1.Container, hostNetwork bool) {
	if c.ImagePullPolicy == "" {
		c.ImagePullPolicy = podutil.DefaultPullPolicy(c.Image)
	}
	if c.TerminationMessagePath == "" {
		c.TerminationMessagePath = defaultTerminationMessagePath
	}
	if c.TerminationMessagePolicy == "" {
		c.TerminationMessagePolicy = v1.TerminationMessageReadFile
	}
	for i := range c.Ports {
		p := &c.Ports[i]
		if p.Protocol == "" {
			p.Protocol = v1.ProtocolTCP
		}
		// With the host's network the container port is the host port.
		if hostNetwork && p.HostPort == 0 {
			p.HostPort = p.ContainerPort
		}
	}
	// Requests default to limits, which decides the pod's QoS class.
	if len(c.Resources.Limits) > 0 {
		if c.Resources.Requests == nil {
			c.Resources.Requests = v1.ResourceList{}
		}
		for name, q := range c.Resources.Limits {
			if _, ok := c.Resources.Requests[name]; !ok {
				c.Resources.Requests[name] = q.DeepCopy()
			}
		}
	}
	for i := range c.Env {
		if f := c.Env[i].ValueFrom; f != nil && f.FieldRef != nil && f.FieldRef.APIVersion == "" {
			f.FieldRef.APIVersion = "v1"
		}
	}
	for _, p := range []*v1.Probe{c.LivenessProbe, c.ReadinessProbe, c.StartupProbe} {
		defaultProbe(p)
	}
}

func defaultProbe(p *v1.Probe) {
	if p == nil {
		return
	}
	if p.TimeoutSeconds == 0 {
		p.TimeoutSeconds = defaultProbeTimeoutSeconds
	}
	if p.PeriodSeconds == 0 {
		p.PeriodSeconds = defaultProbePeriodSeconds
	}
	if p.SuccessThreshold == 0 {
		p.SuccessThreshold = defaultProbeSuccessThreshold
	}
	if p.FailureThreshold == 0 {
		p.FailureThreshold = defaultProbeFailureThreshold
	}
	if h := p.HTTPGet; h != nil {
		if h.Path == "" {
			h.Path = "/"
		}
		if h.Scheme == "" {
			h.Scheme = v1.URISchemeHTTP
		}
	}
}

func defaultVolume(v *v1.Volume) {
	src := &v.VolumeSource
	if *src == (v1.VolumeSource{}) {
		src.EmptyDir = &v1.EmptyDirVolumeSource{}
	}
	if src.HostPath != nil && src.HostPath.Type == nil {
		t := v1.HostPathUnset
		src.HostPath.Type = &t
	}
	if src.DownwardAPI != nil && src.DownwardAPI.DefaultMode == nil {
		m := defaultVolumeMode
		src.DownwardAPI.DefaultMode = &m
	}
	if src.DownwardAPI != nil {
		for i := range src.DownwardAPI.Items {
			if f := src.DownwardAPI.Items[i].FieldRef; f != nil && f.APIVersion == "" {
				f.APIVersion = "v1"
			}
		}
	}
	if src.Projected != nil && src.Projected.DefaultMode == nil {
		m := defaultVolumeMode
		src.Projected.DefaultMode = &m
	}
	if src.Image != nil && src.Image.PullPolicy == "" {
		src.Image.PullPolicy = podutil.DefaultPullPolicy(src.Image.Reference)
	}
}

// checkNoAPIReferences refuses what a static pod cannot use: its mirror pod may not
// reference API objects (the API server's NodeRestriction refuses such a mirror pod),
// and the node has no business fetching them for a pod the API server does not know.
func checkNoAPIReferences(pod *v1.Pod) error {
	spec := &pod.Spec
	if spec.ServiceAccountName != "" {
		return fmt.Errorf("static pods may not use a service account (serviceAccountName %q)", spec.ServiceAccountName)
	}
	if len(spec.ResourceClaims) > 0 {
		return errors.New("static pods may not use resource claims")
	}
	for _, v := range spec.Volumes {
		kind := ""
		switch {
		case v.Secret != nil:
			kind = "secret"
		case v.ConfigMap != nil:
			kind = "configMap"
		case v.PersistentVolumeClaim != nil:
			kind = "persistentVolumeClaim"
		case v.Ephemeral != nil:
			kind = "ephemeral"
		case v.Projected != nil:
			for _, s := range v.Projected.Sources {
				switch {
				case s.Secret != nil:
					kind = "projected secret"
				case s.ConfigMap != nil:
					kind = "projected configMap"
				case s.ServiceAccountToken != nil:
					kind = "projected serviceAccountToken"
				case s.ClusterTrustBundle != nil:
					kind = "projected clusterTrustBundle"
				}
			}
		}
		if kind != "" {
			return fmt.Errorf("static pods may not use %s volumes (volume %q)", kind, v.Name)
		}
	}
	all := append(append([]v1.Container{}, spec.InitContainers...), spec.Containers...)
	for _, c := range all {
		for _, e := range c.Env {
			if f := e.ValueFrom; f != nil && (f.SecretKeyRef != nil || f.ConfigMapKeyRef != nil) {
				return fmt.Errorf("static pods may not read env from secrets or configMaps (container %q, env %q)", c.Name, e.Name)
			}
		}
		for _, e := range c.EnvFrom {
			if e.SecretRef != nil || e.ConfigMapRef != nil {
				return fmt.Errorf("static pods may not use envFrom secrets or configMaps (container %q)", c.Name)
			}
		}
	}
	return nil
}

// validateStaticPod checks what the node needs to run the pod at all.
func validateStaticPod(pod *v1.Pod) error {
	if errs := validation.IsDNS1123Subdomain(pod.Name); len(errs) > 0 {
		return fmt.Errorf("pod name %q is invalid: %s", pod.Name, strings.Join(errs, "; "))
	}
	if errs := validation.IsDNS1123Label(pod.Namespace); len(errs) > 0 {
		return fmt.Errorf("namespace %q is invalid: %s", pod.Namespace, strings.Join(errs, "; "))
	}
	if len(pod.Spec.Containers) == 0 {
		return errors.New("spec.containers is empty")
	}
	names := map[string]bool{}
	all := append(append([]v1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...)
	for i, c := range all {
		if c.Name == "" {
			return fmt.Errorf("container %d has no name", i)
		}
		if errs := validation.IsDNS1123Label(c.Name); len(errs) > 0 {
			return fmt.Errorf("container name %q is invalid: %s", c.Name, strings.Join(errs, "; "))
		}
		if names[c.Name] {
			return fmt.Errorf("container name %q is used twice", c.Name)
		}
		names[c.Name] = true
		if c.Image == "" {
			return fmt.Errorf("container %q has no image", c.Name)
		}
		// The API server's rule: an unmasked /proc only in the pod's own user namespace.
		if sc := c.SecurityContext; sc != nil && sc.ProcMount != nil && *sc.ProcMount == v1.UnmaskedProcMount &&
			(pod.Spec.HostUsers == nil || *pod.Spec.HostUsers) {
			return fmt.Errorf("container %q: securityContext.procMount: Invalid value: %q: `hostUsers` must be false to use `Unmasked`", c.Name, *sc.ProcMount)
		}
	}
	return nil
}
