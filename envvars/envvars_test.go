package envvars

import (
	"context"
	"errors"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"
)

// fakeSources is an in-memory Sources that records the calls it gets.
type fakeSources struct {
	cms      map[string]*v1.ConfigMap // key ns/name
	secrets  map[string]*v1.Secret
	services map[string][]*v1.Service // key namespace
	svcErr   error
	calls    []string
}

func (f *fakeSources) ConfigMap(_ context.Context, ns, name string) (*v1.ConfigMap, error) {
	f.calls = append(f.calls, "cm:"+ns+"/"+name)
	if cm, ok := f.cms[ns+"/"+name]; ok {
		return cm, nil
	}
	return nil, apierrors.NewNotFound(v1.Resource("configmaps"), name)
}

func (f *fakeSources) Secret(_ context.Context, ns, name string) (*v1.Secret, error) {
	f.calls = append(f.calls, "secret:"+ns+"/"+name)
	if s, ok := f.secrets[ns+"/"+name]; ok {
		return s, nil
	}
	return nil, apierrors.NewNotFound(v1.Resource("secrets"), name)
}

func (f *fakeSources) Services(_ context.Context, ns string) ([]*v1.Service, error) {
	f.calls = append(f.calls, "svc:"+ns)
	if f.svcErr != nil {
		return nil, f.svcErr
	}
	return f.services[ns], nil
}

func svc(ns, name, ip string, ports ...v1.ServicePort) *v1.Service {
	return &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       v1.ServiceSpec{ClusterIP: ip, Ports: ports},
	}
}

func kubernetesSvc() *v1.Service {
	return svc("default", "kubernetes", "10.96.0.1", v1.ServicePort{Name: "https", Port: 443, Protocol: v1.ProtocolTCP})
}

var kubernetesVars = []string{
	"KUBERNETES_SERVICE_HOST=10.96.0.1",
	"KUBERNETES_SERVICE_PORT=443",
	"KUBERNETES_SERVICE_PORT_HTTPS=443",
	"KUBERNETES_PORT=tcp://10.96.0.1:443",
	"KUBERNETES_PORT_443_TCP=tcp://10.96.0.1:443",
	"KUBERNETES_PORT_443_TCP_PROTO=tcp",
	"KUBERNETES_PORT_443_TCP_PORT=443",
	"KUBERNETES_PORT_443_TCP_ADDR=10.96.0.1",
}

func basePod() *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:   "ns1",
			Name:        "web",
			UID:         "uid-1",
			Labels:      map[string]string{"app": "web", "tier": "front"},
			Annotations: map[string]string{"a.io/x": `say "hi"`},
		},
		Spec: v1.PodSpec{
			NodeName:           "node-a",
			ServiceAccountName: "sa1",
			Containers: []v1.Container{{
				Name: "main",
				Resources: v1.ResourceRequirements{
					Limits:   v1.ResourceList{v1.ResourceCPU: resource.MustParse("500m"), v1.ResourceMemory: resource.MustParse("128Mi")},
					Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("250m"), v1.ResourceMemory: resource.MustParse("64Mi")},
				},
			}, {
				Name: "side",
			}},
		},
	}
}

func flatten(kvs []*runtimeapi.KeyValue) []string {
	out := make([]string, 0, len(kvs))
	for _, kv := range kvs {
		out = append(out, kv.Key+"="+string(kv.Value))
	}
	return out
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func concat(parts ...[]string) []string {
	var out []string
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

var info = PodInfo{
	PodIPs:          []string{"10.244.0.5", "fd00::5"},
	HostIPs:         []string{"192.168.1.10", "fd00::10"},
	NodeName:        "node-a",
	NodeAllocatable: v1.ResourceList{v1.ResourceCPU: resource.MustParse("2"), v1.ResourceMemory: resource.MustParse("4Gi"), v1.ResourceEphemeralStorage: resource.MustParse("10Gi")},
}

func TestForContainer(t *testing.T) {
	cm := &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns1", Name: "cfg"},
		Data: map[string]string{"B_KEY": "b", "A_KEY": "a", "bad=key": "x", "LEVEL": "debug"}}
	sec := &v1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns1", Name: "sec"},
		Data: map[string][]byte{"PASSWORD": []byte("s3cret")}}

	tests := []struct {
		name    string
		pod     func(*v1.Pod)
		c       func(*v1.Container)
		src     *fakeSources
		nilSrc  bool
		want    []string // exact, ordered; nil means not checked
		wantErr string
	}{
		{
			name: "service links for own namespace plus master service, sorted by service name",
			src: &fakeSources{services: map[string][]*v1.Service{
				"default": {kubernetesSvc(), svc("default", "other", "10.96.0.9", v1.ServicePort{Port: 80})},
				"ns1": {
					svc("ns1", "redis-master", "10.0.0.11", v1.ServicePort{Port: 6379, Protocol: v1.ProtocolTCP}, v1.ServicePort{Name: "metrics", Port: 9121, Protocol: v1.ProtocolUDP}),
					svc("ns1", "headless", v1.ClusterIPNone, v1.ServicePort{Port: 80}),
					svc("ns1", "ext", "", v1.ServicePort{Port: 80}),
					svc("ns1", "v6", "fd00::1", v1.ServicePort{Port: 80}),
				},
			}},
			want: concat(kubernetesVars, []string{
				"REDIS_MASTER_SERVICE_HOST=10.0.0.11",
				"REDIS_MASTER_SERVICE_PORT=6379",
				"REDIS_MASTER_SERVICE_PORT_METRICS=9121",
				"REDIS_MASTER_PORT=tcp://10.0.0.11:6379",
				"REDIS_MASTER_PORT_6379_TCP=tcp://10.0.0.11:6379",
				"REDIS_MASTER_PORT_6379_TCP_PROTO=tcp",
				"REDIS_MASTER_PORT_6379_TCP_PORT=6379",
				"REDIS_MASTER_PORT_6379_TCP_ADDR=10.0.0.11",
				"REDIS_MASTER_PORT_9121_UDP=udp://10.0.0.11:9121",
				"REDIS_MASTER_PORT_9121_UDP_PROTO=udp",
				"REDIS_MASTER_PORT_9121_UDP_PORT=9121",
				"REDIS_MASTER_PORT_9121_UDP_ADDR=10.0.0.11",
				"V6_SERVICE_HOST=fd00::1",
				"V6_SERVICE_PORT=80",
				"V6_PORT=tcp://[fd00::1]:80",
				"V6_PORT_80_TCP=tcp://[fd00::1]:80",
				"V6_PORT_80_TCP_PROTO=tcp",
				"V6_PORT_80_TCP_PORT=80",
				"V6_PORT_80_TCP_ADDR=fd00::1",
			}),
		},
		{
			name: "enableServiceLinks=false still gets the kubernetes service",
			pod:  func(p *v1.Pod) { p.Spec.EnableServiceLinks = ptr.To(false) },
			src: &fakeSources{services: map[string][]*v1.Service{
				"default": {kubernetesSvc()},
				"ns1":     {svc("ns1", "db", "10.0.0.12", v1.ServicePort{Port: 5432})},
			}},
			want: kubernetesVars,
		},
		{
			name: "pod in the master namespace with links gets its services once",
			pod:  func(p *v1.Pod) { p.Namespace = "default" },
			src: &fakeSources{services: map[string][]*v1.Service{
				"default": {kubernetesSvc(), svc("default", "a", "10.0.0.2", v1.ServicePort{Port: 1})},
			}},
			want: concat([]string{
				"A_SERVICE_HOST=10.0.0.2", "A_SERVICE_PORT=1", "A_PORT=tcp://10.0.0.2:1",
				"A_PORT_1_TCP=tcp://10.0.0.2:1", "A_PORT_1_TCP_PROTO=tcp", "A_PORT_1_TCP_PORT=1", "A_PORT_1_TCP_ADDR=10.0.0.2",
			}, kubernetesVars),
		},
		{
			name:    "service listing failure is an error",
			src:     &fakeSources{svcErr: errors.New("boom")},
			wantErr: "failed to list services",
		},
		{
			name: "envFrom configMap with prefix, sorted keys, invalid names skipped; secret values",
			src:  &fakeSources{cms: map[string]*v1.ConfigMap{"ns1/cfg": cm}, secrets: map[string]*v1.Secret{"ns1/sec": sec}},
			c: func(c *v1.Container) {
				c.EnvFrom = []v1.EnvFromSource{
					{Prefix: "P_", ConfigMapRef: &v1.ConfigMapEnvSource{LocalObjectReference: v1.LocalObjectReference{Name: "cfg"}}},
					{SecretRef: &v1.SecretEnvSource{LocalObjectReference: v1.LocalObjectReference{Name: "sec"}}},
				}
			},
			want: []string{"P_A_KEY=a", "P_B_KEY=b", "P_LEVEL=debug", "PASSWORD=s3cret"},
		},
		{
			name: "optional missing envFrom sources are skipped",
			src:  &fakeSources{},
			c: func(c *v1.Container) {
				c.EnvFrom = []v1.EnvFromSource{
					{ConfigMapRef: &v1.ConfigMapEnvSource{LocalObjectReference: v1.LocalObjectReference{Name: "nope"}, Optional: ptr.To(true)}},
					{SecretRef: &v1.SecretEnvSource{LocalObjectReference: v1.LocalObjectReference{Name: "nope"}, Optional: ptr.To(true)}},
				}
				c.Env = []v1.EnvVar{{Name: "X", Value: "1"}}
			},
			want: []string{"X=1"},
		},
		{
			name: "required missing envFrom configMap is an error",
			src:  &fakeSources{},
			c: func(c *v1.Container) {
				c.EnvFrom = []v1.EnvFromSource{{ConfigMapRef: &v1.ConfigMapEnvSource{LocalObjectReference: v1.LocalObjectReference{Name: "nope"}}}}
			},
			wantErr: `couldn't get configMap ns1/nope: configmaps "nope" not found`,
		},
		{
			name: "required missing envFrom secret is an error",
			src:  &fakeSources{},
			c: func(c *v1.Container) {
				c.EnvFrom = []v1.EnvFromSource{{SecretRef: &v1.SecretEnvSource{LocalObjectReference: v1.LocalObjectReference{Name: "nope"}}}}
			},
			wantErr: `couldn't get secret ns1/nope`,
		},
		{
			name: "env overrides envFrom and keeps the first position; later env overrides earlier env",
			src:  &fakeSources{cms: map[string]*v1.ConfigMap{"ns1/cfg": cm}},
			c: func(c *v1.Container) {
				c.EnvFrom = []v1.EnvFromSource{{ConfigMapRef: &v1.ConfigMapEnvSource{LocalObjectReference: v1.LocalObjectReference{Name: "cfg"}}}}
				c.Env = []v1.EnvVar{{Name: "Z", Value: "z1"}, {Name: "B_KEY", Value: "override"}, {Name: "Z", Value: "z2"}}
			},
			want: []string{"A_KEY=a", "B_KEY=override", "LEVEL=debug", "Z=z2"},
		},
		{
			name: "expansion against earlier vars, envFrom and services; escapes and unknown refs",
			src: &fakeSources{
				cms:      map[string]*v1.ConfigMap{"ns1/cfg": cm},
				services: map[string][]*v1.Service{"default": {kubernetesSvc()}},
			},
			pod: func(p *v1.Pod) { p.Spec.EnableServiceLinks = ptr.To(false) },
			c: func(c *v1.Container) {
				c.EnvFrom = []v1.EnvFromSource{{ConfigMapRef: &v1.ConfigMapEnvSource{LocalObjectReference: v1.LocalObjectReference{Name: "cfg"}}}}
				c.Env = []v1.EnvVar{
					{Name: "URL", Value: "https://$(KUBERNETES_SERVICE_HOST):$(KUBERNETES_SERVICE_PORT)/$(LEVEL)"},
					{Name: "LATER_REF", Value: "$(DEFINED_LATER)"},
					{Name: "ESC", Value: "$$(LEVEL) $$ $x $(NOPE) $(LEVEL"},
					{Name: "CHAIN", Value: "$(URL)?x"},
					{Name: "DEFINED_LATER", Value: "v"},
				}
			},
			want: concat(kubernetesVars, []string{
				"A_KEY=a", "B_KEY=b", "LEVEL=debug",
				"URL=https://10.96.0.1:443/debug",
				"LATER_REF=$(DEFINED_LATER)",
				"ESC=$(LEVEL) $ $x $(NOPE) $(LEVEL",
				"CHAIN=https://10.96.0.1:443/debug?x",
				"DEFINED_LATER=v",
			}),
		},
		{
			name: "configMapKeyRef and secretKeyRef, optional missing ones are not set",
			src:  &fakeSources{cms: map[string]*v1.ConfigMap{"ns1/cfg": cm}, secrets: map[string]*v1.Secret{"ns1/sec": sec}},
			c: func(c *v1.Container) {
				c.Env = []v1.EnvVar{
					{Name: "L", ValueFrom: &v1.EnvVarSource{ConfigMapKeyRef: &v1.ConfigMapKeySelector{LocalObjectReference: v1.LocalObjectReference{Name: "cfg"}, Key: "LEVEL"}}},
					{Name: "P", ValueFrom: &v1.EnvVarSource{SecretKeyRef: &v1.SecretKeySelector{LocalObjectReference: v1.LocalObjectReference{Name: "sec"}, Key: "PASSWORD"}}},
					{Name: "NOKEY", ValueFrom: &v1.EnvVarSource{ConfigMapKeyRef: &v1.ConfigMapKeySelector{LocalObjectReference: v1.LocalObjectReference{Name: "cfg"}, Key: "MISSING", Optional: ptr.To(true)}}},
					{Name: "NOCM", ValueFrom: &v1.EnvVarSource{ConfigMapKeyRef: &v1.ConfigMapKeySelector{LocalObjectReference: v1.LocalObjectReference{Name: "gone"}, Key: "K", Optional: ptr.To(true)}}},
					{Name: "NOSECKEY", ValueFrom: &v1.EnvVarSource{SecretKeyRef: &v1.SecretKeySelector{LocalObjectReference: v1.LocalObjectReference{Name: "sec"}, Key: "MISSING", Optional: ptr.To(true)}}},
					{Name: "NOSEC", ValueFrom: &v1.EnvVarSource{SecretKeyRef: &v1.SecretKeySelector{LocalObjectReference: v1.LocalObjectReference{Name: "gone"}, Key: "K", Optional: ptr.To(true)}}},
				}
			},
			want: []string{"L=debug", "P=s3cret"},
		},
		{
			name: "missing required configMap key",
			src:  &fakeSources{cms: map[string]*v1.ConfigMap{"ns1/cfg": cm}},
			c: func(c *v1.Container) {
				c.Env = []v1.EnvVar{{Name: "F", ValueFrom: &v1.EnvVarSource{ConfigMapKeyRef: &v1.ConfigMapKeySelector{LocalObjectReference: v1.LocalObjectReference{Name: "cfg"}, Key: "FOO"}}}}
			},
			wantErr: "couldn't find key FOO in ConfigMap ns1/cfg",
		},
		{
			name: "missing required secret key",
			src:  &fakeSources{secrets: map[string]*v1.Secret{"ns1/sec": sec}},
			c: func(c *v1.Container) {
				c.Env = []v1.EnvVar{{Name: "F", ValueFrom: &v1.EnvVarSource{SecretKeyRef: &v1.SecretKeySelector{LocalObjectReference: v1.LocalObjectReference{Name: "sec"}, Key: "FOO"}}}}
			},
			wantErr: "couldn't find key FOO in Secret ns1/sec",
		},
		{
			name: "optional-missing then required reference to the same configMap is still an error",
			src:  &fakeSources{},
			c: func(c *v1.Container) {
				c.Env = []v1.EnvVar{
					{Name: "A", ValueFrom: &v1.EnvVarSource{ConfigMapKeyRef: &v1.ConfigMapKeySelector{LocalObjectReference: v1.LocalObjectReference{Name: "gone"}, Key: "K", Optional: ptr.To(true)}}},
					{Name: "B", ValueFrom: &v1.EnvVarSource{ConfigMapKeyRef: &v1.ConfigMapKeySelector{LocalObjectReference: v1.LocalObjectReference{Name: "gone"}, Key: "K"}}},
				}
			},
			wantErr: `configmaps "gone" not found`,
		},
		{
			name: "fieldRef paths",
			src:  &fakeSources{},
			c: func(c *v1.Container) {
				paths := []string{"metadata.name", "metadata.namespace", "metadata.uid", "metadata.labels['app']",
					"metadata.annotations['a.io/x']", "metadata.labels", "spec.nodeName", "spec.serviceAccountName",
					"status.hostIP", "status.hostIPs", "status.podIP", "status.podIPs"}
				for _, p := range paths {
					c.Env = append(c.Env, v1.EnvVar{Name: strings.NewReplacer(".", "_", "[", "_", "]", "", "'", "", "/", "_").Replace(p),
						ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{APIVersion: "v1", FieldPath: p}}})
				}
			},
			want: []string{
				"metadata_name=web", "metadata_namespace=ns1", "metadata_uid=uid-1", "metadata_labels_app=web",
				`metadata_annotations_a_io_x=say "hi"`, "metadata_labels=app=\"web\"\ntier=\"front\"",
				"spec_nodeName=node-a", "spec_serviceAccountName=sa1",
				"status_hostIP=192.168.1.10", "status_hostIPs=192.168.1.10,fd00::10",
				"status_podIP=10.244.0.5", "status_podIPs=10.244.0.5,fd00::5",
			},
		},
		{
			name: "unsupported fieldRef is an error",
			src:  &fakeSources{},
			c: func(c *v1.Container) {
				c.Env = []v1.EnvVar{{Name: "X", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "spec.bogus"}}}}
			},
			wantErr: "unsupported fieldPath",
		},
		{
			name: "resourceFieldRef with divisors, other container and node-allocatable fallback",
			src:  &fakeSources{},
			c: func(c *v1.Container) {
				ref := func(name, container, res, div string) v1.EnvVar {
					fs := &v1.ResourceFieldSelector{ContainerName: container, Resource: res}
					if div != "" {
						fs.Divisor = resource.MustParse(div)
					}
					return v1.EnvVar{Name: name, ValueFrom: &v1.EnvVarSource{ResourceFieldRef: fs}}
				}
				c.Env = []v1.EnvVar{
					ref("CPU_LIMIT", "", "limits.cpu", ""),
					ref("CPU_LIMIT_M", "", "limits.cpu", "1m"),
					ref("MEM_LIMIT_MI", "", "limits.memory", "1Mi"),
					ref("MEM_REQ", "", "requests.memory", ""),
					ref("CPU_REQ_M", "", "requests.cpu", "1m"),
					ref("SIDE_CPU", "side", "limits.cpu", ""),
					ref("SIDE_MEM_GI", "side", "limits.memory", "1Gi"),
					ref("EPH", "", "limits.ephemeral-storage", "1Gi"),
				}
			},
			want: []string{"CPU_LIMIT=1", "CPU_LIMIT_M=500", "MEM_LIMIT_MI=128", "MEM_REQ=67108864",
				"CPU_REQ_M=250", "SIDE_CPU=2", "SIDE_MEM_GI=4", "EPH=10"},
		},
		{
			name: "resourceFieldRef falls back to pod-level limits before node allocatable",
			src:  &fakeSources{},
			pod: func(p *v1.Pod) {
				p.Spec.Resources = &v1.ResourceRequirements{Limits: v1.ResourceList{v1.ResourceMemory: resource.MustParse("1Gi")}}
			},
			c: func(c *v1.Container) {
				c.Env = []v1.EnvVar{{Name: "M", ValueFrom: &v1.EnvVarSource{ResourceFieldRef: &v1.ResourceFieldSelector{
					ContainerName: "side", Resource: "limits.memory", Divisor: resource.MustParse("1Mi")}}}}
			},
			want: []string{"M=1024"},
		},
		{
			name: "resourceFieldRef naming an unknown container",
			src:  &fakeSources{},
			c: func(c *v1.Container) {
				c.Env = []v1.EnvVar{{Name: "M", ValueFrom: &v1.EnvVarSource{ResourceFieldRef: &v1.ResourceFieldSelector{ContainerName: "ghost", Resource: "limits.memory"}}}}
			},
			wantErr: "container ghost not found",
		},
		{
			name:   "standalone: no services, required configMap ref is an error",
			nilSrc: true,
			c: func(c *v1.Container) {
				c.Env = []v1.EnvVar{{Name: "F", ValueFrom: &v1.EnvVarSource{ConfigMapKeyRef: &v1.ConfigMapKeySelector{LocalObjectReference: v1.LocalObjectReference{Name: "cfg"}, Key: "FOO"}}}}
			},
			wantErr: "no API server connection",
		},
		{
			name:   "standalone: plain values work, optional refs are skipped",
			nilSrc: true,
			c: func(c *v1.Container) {
				c.Env = []v1.EnvVar{
					{Name: "A", Value: "1"},
					{Name: "F", ValueFrom: &v1.EnvVarSource{ConfigMapKeyRef: &v1.ConfigMapKeySelector{LocalObjectReference: v1.LocalObjectReference{Name: "cfg"}, Key: "FOO", Optional: ptr.To(true)}}},
					{Name: "EMPTY"},
				}
			},
			want: []string{"A=1", "EMPTY="},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := basePod()
			if tt.pod != nil {
				tt.pod(pod)
			}
			c := &pod.Spec.Containers[0]
			if tt.c != nil {
				tt.c(c)
			}
			var src Sources
			if !tt.nilSrc {
				src = tt.src
			}
			got, err := ForContainer(context.Background(), pod, c, src, info)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if g := flatten(got); !equalStrings(g, tt.want) {
				t.Errorf("env mismatch\n got: %q\nwant: %q", g, tt.want)
			}
		})
	}
}

func TestForContainerFetchesEachObjectOnce(t *testing.T) {
	src := &fakeSources{cms: map[string]*v1.ConfigMap{"ns1/cfg": {Data: map[string]string{"A": "1", "B": "2"}}}}
	pod := basePod()
	c := &pod.Spec.Containers[0]
	c.EnvFrom = []v1.EnvFromSource{{ConfigMapRef: &v1.ConfigMapEnvSource{LocalObjectReference: v1.LocalObjectReference{Name: "cfg"}}}}
	c.Env = []v1.EnvVar{
		{Name: "X", ValueFrom: &v1.EnvVarSource{ConfigMapKeyRef: &v1.ConfigMapKeySelector{LocalObjectReference: v1.LocalObjectReference{Name: "cfg"}, Key: "A"}}},
		{Name: "Y", ValueFrom: &v1.EnvVarSource{ConfigMapKeyRef: &v1.ConfigMapKeySelector{LocalObjectReference: v1.LocalObjectReference{Name: "cfg"}, Key: "B"}}},
	}
	if _, err := ForContainer(context.Background(), pod, c, src, info); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, call := range src.calls {
		if call == "cm:ns1/cfg" {
			n++
		}
	}
	if n != 1 {
		t.Errorf("configMap fetched %d times, want 1 (calls %v)", n, src.calls)
	}
}

func TestExpand(t *testing.T) {
	vars := map[string]string{"A": "alpha", "B": "$(A)", "EMPTY": ""}
	lookup := func(n string) (string, bool) { v, ok := vars[n]; return v, ok }
	tests := []struct{ in, want string }{
		{"plain", "plain"},
		{"$(A)", "alpha"},
		{"x$(A)y$(A)", "xalphayalpha"},
		{"$(B)", "$(A)"}, // no recursive expansion
		{"$(EMPTY)|", "|"},
		{"$$(A)", "$(A)"},
		{"$$$(A)", "$alpha"},
		{"$(MISSING)", "$(MISSING)"},
		{"$()", "$()"},
		{"$(A", "$(A"},
		{"$A", "$A"},
		{"trailing$", "trailing$"},
		{"$", "$"},
		{"$(A $(B)", "$(A $(B)"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			if got := Expand(tt.in, lookup); got != tt.want {
				t.Errorf("Expand(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestExpandCommand(t *testing.T) {
	env := []*runtimeapi.KeyValue{
		{Key: "TEST_VAR", Value: []byte("test-value")},
		{Key: "FROM_CM", Value: []byte("cm value")},
		{Key: "EMPTY", Value: []byte("")},
	}
	tests := []struct {
		name string
		in   []string
		want []string
	}{
		{"nil stays nil: the image's entrypoint applies", nil, nil},
		{"empty stays empty", []string{}, []string{}},
		{"conformance command", []string{"sh", "-c", "TEST_VAR=wrong echo \"$(TEST_VAR)\""}, []string{"sh", "-c", "TEST_VAR=wrong echo \"test-value\""}},
		{"several in one word", []string{"$(TEST_VAR)/$(FROM_CM)"}, []string{"test-value/cm value"}},
		{"escaped", []string{"$$(TEST_VAR)", "$$$(TEST_VAR)"}, []string{"$(TEST_VAR)", "$test-value"}},
		{"unresolvable kept", []string{"$(NOPE)", "x$(NOPE"}, []string{"$(NOPE)", "x$(NOPE"}},
		{"empty value expands to nothing", []string{"[$(EMPTY)]"}, []string{"[]"}},
		{"shell syntax untouched", []string{"$TEST_VAR ${TEST_VAR}"}, []string{"$TEST_VAR ${TEST_VAR}"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ExpandCommand(tt.in, env)
			if (got == nil) != (tt.want == nil) || strings.Join(got, "\x00") != strings.Join(tt.want, "\x00") || len(got) != len(tt.want) {
				t.Errorf("ExpandCommand(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
	// The spec's slice is never written to: the pod object is shared.
	in := []string{"$(TEST_VAR)"}
	ExpandCommand(in, env)
	if in[0] != "$(TEST_VAR)" {
		t.Errorf("ExpandCommand changed its input to %q", in)
	}
}

func TestMetadataFieldValue(t *testing.T) {
	pod := basePod()
	tests := []struct {
		path, want, wantErr string
	}{
		{path: "metadata.annotations", want: `a.io/x="say \"hi\""`},
		{path: "metadata.labels", want: "app=\"web\"\ntier=\"front\""},
		{path: "metadata.labels['missing']", want: ""},
		{path: "metadata.labels['bad key!']", wantErr: "invalid key subscript"},
		{path: "metadata.name['x']", wantErr: "does not support subscript"},
		{path: "status.phase", wantErr: "unsupported fieldPath"},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			got, err := MetadataFieldValue(pod, "v1", tt.path)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("got %q, %v; want %q", got, err, tt.want)
			}
		})
	}
	if _, err := MetadataFieldValue(pod, "v2", "metadata.name"); err == nil {
		t.Error("apiVersion v2 accepted")
	}
}

func TestSourcesFromClientset(t *testing.T) {
	cs := fake.NewClientset(
		kubernetesSvc(),
		svc("ns1", "db", "10.0.0.12", v1.ServicePort{Port: 5432}),
		&v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns1", Name: "cfg"}, Data: map[string]string{"K": "v"}},
		&v1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns1", Name: "sec"}, Data: map[string][]byte{"S": []byte("s")}},
	)
	pod := basePod()
	c := &pod.Spec.Containers[0]
	c.Env = []v1.EnvVar{
		{Name: "K", ValueFrom: &v1.EnvVarSource{ConfigMapKeyRef: &v1.ConfigMapKeySelector{LocalObjectReference: v1.LocalObjectReference{Name: "cfg"}, Key: "K"}}},
		{Name: "S", ValueFrom: &v1.EnvVarSource{SecretKeyRef: &v1.SecretKeySelector{LocalObjectReference: v1.LocalObjectReference{Name: "sec"}, Key: "S"}}},
		{Name: "M", ValueFrom: &v1.EnvVarSource{ConfigMapKeyRef: &v1.ConfigMapKeySelector{LocalObjectReference: v1.LocalObjectReference{Name: "missing"}, Key: "K", Optional: ptr.To(true)}}},
	}
	got, err := ForContainer(context.Background(), pod, c, SourcesFromClientset(cs), info)
	if err != nil {
		t.Fatal(err)
	}
	g := flatten(got)
	want := map[string]bool{"K=v": true, "S=s": true, "DB_SERVICE_HOST=10.0.0.12": true, "KUBERNETES_SERVICE_HOST=10.96.0.1": true}
	for _, kv := range g {
		delete(want, kv)
		if strings.HasPrefix(kv, "M=") {
			t.Errorf("optional missing configMap produced %q", kv)
		}
	}
	if len(want) != 0 {
		t.Errorf("missing %v in %v", want, g)
	}
}
