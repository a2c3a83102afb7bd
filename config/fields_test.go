package config

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	tracingapi "k8s.io/component-base/tracing/api/v1"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"
)

// TestFieldRulesCoverKubeletConfiguration is the guard: every field of the
// upstream KubeletConfiguration is decided (wired with a test, refused when
// set, or without effect upstream). A new k8s.io/kubelet version with a new
// field fails here until someone decides.
func TestFieldRulesCoverKubeletConfiguration(t *testing.T) {
	rules := FieldRules()
	byPath := map[string]FieldRule{}
	for _, r := range rules {
		if _, dup := byPath[r.Path]; dup {
			t.Errorf("%s: listed twice", r.Path)
		}
		byPath[r.Path] = r
		if _, ok := typeByPath(reflect.TypeFor[kubeletconfigv1beta1.KubeletConfiguration](), r.Path); !ok {
			t.Errorf("%s: no such field in KubeletConfiguration", r.Path)
		}
		switch r.Status {
		case FieldWired:
			if !regexp.MustCompile(`^[a-z][a-z0-9/]*\.Test[A-Za-z0-9_]+$`).MatchString(r.Test) || r.Reason != "" {
				t.Errorf("%s: wired needs Test as pkg.TestName and no Reason, got %+v", r.Path, r)
			}
		case FieldRefused, FieldNoEffectUpstream:
			if r.Reason == "" || r.Test != "" {
				t.Errorf("%s: %s needs a Reason and no Test, got %+v", r.Path, r.Status, r)
			}
		default:
			t.Errorf("%s: unknown status %q", r.Path, r.Status)
		}
	}
	var missing []string
	var walk func(rt reflect.Type, prefix string)
	walk = func(rt reflect.Type, prefix string) {
		for _, name := range slices.Sorted(mapKeys(jsonFieldIndex(rt))) {
			if prefix == "" && (name == "apiVersion" || name == "kind") {
				continue
			}
			p := joinPath(prefix, name)
			if _, ok := byPath[p]; ok {
				continue
			}
			// A field may be decided through its sub-fields instead, all of them.
			ft, _ := typeByPath(rt, name)
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			nested := slices.ContainsFunc(rules, func(r FieldRule) bool { return strings.HasPrefix(r.Path, p+".") })
			if nested && ft.Kind() == reflect.Struct {
				walk(ft, p)
				continue
			}
			missing = append(missing, p)
		}
	}
	walk(reflect.TypeFor[kubeletconfigv1beta1.KubeletConfiguration](), "")
	if len(missing) > 0 {
		t.Errorf("KubeletConfiguration fields with no decision in config.FieldRules (wire them with a test, or refuse them when set): %s", strings.Join(missing, ", "))
	}

	counts := map[FieldStatus]int{}
	for _, r := range rules {
		counts[r.Status]++
	}
	t.Logf("%d rules: %d wired, %d refused when set, %d without effect upstream", len(rules), counts[FieldWired], counts[FieldRefused], counts[FieldNoEffectUpstream])
}

// TestFieldRulesNameExistingTests checks that every test a wired field names
// exists: "pkg.TestName" is `func TestName(` in pkg/*_test.go below the
// repository root.
func TestFieldRulesNameExistingTests(t *testing.T) {
	root := repoRoot(t)
	var missing []string
	seen := map[string]bool{}
	for _, r := range FieldRules() {
		if r.Status != FieldWired || seen[r.Test] {
			continue
		}
		seen[r.Test] = true
		pkg, name, _ := strings.Cut(r.Test, ".")
		if !testExists(t, filepath.Join(root, filepath.FromSlash(pkg)), name) {
			missing = append(missing, r.Test+" (for "+r.Path+")")
		}
	}
	if len(missing) > 0 {
		t.Errorf("config.FieldRules names %d tests that do not exist (a wired field must name the test that proves it; on the issue-16 branches the tests other helpers add are listed here until they are merged):\n  %s", len(missing), strings.Join(missing, "\n  "))
	}
}

func testExists(t *testing.T, dir, name string) bool {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
	if err != nil {
		t.Fatal(err)
	}
	needle := []byte("func " + name + "(")
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(data), "\n") {
			if strings.HasPrefix(line, string(needle)) {
				return true
			}
		}
	}
	return false
}

// repoRoot is the nearest directory above the test's working directory (the
// package directory) that holds go.mod.
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the working directory")
		}
		dir = parent
	}
}

func typeByPath(rt reflect.Type, path string) (reflect.Type, bool) {
	for _, name := range strings.Split(path, ".") {
		for rt.Kind() == reflect.Pointer {
			rt = rt.Elem()
		}
		if rt.Kind() != reflect.Struct {
			return nil, false
		}
		idx, ok := jsonFieldIndex(rt)[name]
		if !ok {
			return nil, false
		}
		rt = rt.FieldByIndex(idx).Type
	}
	return rt, true
}

func TestRefuseUnbuilt(t *testing.T) {
	tests := []struct {
		name string
		set  func(kc *kubeletconfigv1beta1.KubeletConfiguration)
		want []string // fields refused, in order
	}{
		{name: "defaults", set: func(*kubeletconfigv1beta1.KubeletConfiguration) {}},
		{name: "explicit default values", set: func(kc *kubeletconfigv1beta1.KubeletConfiguration) {
			kc.CPUManagerPolicy = "none"
			kc.ContainerLogMaxSize = "10Mi"
			kc.TopologyManagerScope = "container"
		}},
		{name: "explicit zero from a drop-in is unset", set: func(kc *kubeletconfigv1beta1.KubeletConfiguration) {
			kc.CPUManagerReconcilePeriod = metav1.Duration{}
			kc.VolumeStatsAggPeriod = metav1.Duration{}
			kc.QOSReserved = map[string]string{}
		}},
		{name: "the debugging handlers may be turned off", set: func(kc *kubeletconfigv1beta1.KubeletConfiguration) {
			kc.EnableProfilingHandler = ptr.To(false)
			kc.EnableDebugFlagsHandler = ptr.To(false)
			kc.EnableSystemLogHandler = ptr.To(false)
		}},
		{name: "the debugging handlers may be turned on, the log query and contention profiling too", set: func(kc *kubeletconfigv1beta1.KubeletConfiguration) {
			kc.EnableProfilingHandler = ptr.To(true)
			kc.EnableDebugFlagsHandler = ptr.To(true)
			kc.EnableSystemLogHandler = ptr.To(true)
			kc.EnableSystemLogQuery = ptr.To(true)
			kc.EnableContentionProfiling = true
		}},
		{name: "no effect upstream is accepted", set: func(kc *kubeletconfigv1beta1.KubeletConfiguration) {
			kc.StreamingConnectionIdleTimeout = metav1.Duration{Duration: time.Hour}
			kc.IPTablesDropBit = ptr.To[int32](16)
		}},
		{name: "static CPU manager with options is built", set: func(kc *kubeletconfigv1beta1.KubeletConfiguration) {
			kc.CPUManagerPolicy = "static"
			kc.CPUManagerPolicyOptions = map[string]string{"full-pcpus-only": "true"}
			kc.CPUManagerReconcilePeriod = metav1.Duration{Duration: time.Second}
		}},
		{name: "topology manager policy, scope and options are built", set: func(kc *kubeletconfigv1beta1.KubeletConfiguration) {
			kc.TopologyManagerPolicy = "restricted"
			kc.TopologyManagerScope = "pod"
			kc.TopologyManagerPolicyOptions = map[string]string{"prefer-closest-numa-nodes": "true"}
		}},
		{name: "static memory manager with reserved memory is built", set: func(kc *kubeletconfigv1beta1.KubeletConfiguration) {
			kc.MemoryManagerPolicy = "Static"
			kc.ReservedMemory = []kubeletconfigv1beta1.MemoryReservation{{NumaNode: 0, Limits: v1.ResourceList{v1.ResourceMemory: resource.MustParse("1Gi")}}}
		}},
		{name: "two refused fields", set: func(kc *kubeletconfigv1beta1.KubeletConfiguration) {
			kc.VolumePluginDir = "/opt/flex"
			kc.KernelMemcgNotification = true
		}, want: []string{"volumePluginDir", "kernelMemcgNotification"}},
		{name: "nested wired field", set: func(kc *kubeletconfigv1beta1.KubeletConfiguration) {
			kc.UserNamespaces.IDsPerPod = ptr.To[int64](2 * 65536)
		}},
		{name: "wired pointer struct", set: func(kc *kubeletconfigv1beta1.KubeletConfiguration) {
			kc.Tracing = &tracingapi.TracingConfiguration{SamplingRatePerMillion: ptr.To[int32](100)}
		}},
		{name: "bool set against a default-false feature", set: func(kc *kubeletconfigv1beta1.KubeletConfiguration) {
			kc.RunOnce = true
			kc.EnableControllerAttachDetach = ptr.To(false)
		}, want: []string{"runOnce", "enableControllerAttachDetach"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			kc := &kubeletconfigv1beta1.KubeletConfiguration{}
			SetDefaults(kc)
			tc.set(kc)
			var got []string
			for _, err := range refuseUnbuilt(kc) {
				var fe *FieldError
				if !errors.As(err, &fe) {
					t.Fatalf("%v is not a *FieldError", err)
				}
				if !strings.Contains(fe.Detail, "which nodelet does not support: ") {
					t.Errorf("%v: the refusal must say why", err)
				}
				got = append(got, fe.Field)
			}
			rulesOrder := func(s []string) []string {
				var out []string
				for _, r := range FieldRules() {
					if slices.Contains(s, r.Path) {
						out = append(out, r.Path)
					}
				}
				return out
			}
			if !slices.Equal(got, rulesOrder(tc.want)) {
				t.Errorf("refused %v, want %v", got, rulesOrder(tc.want))
			}
		})
	}
}

// TestLoadRefusesUnbuiltField: Load itself refuses, naming the field and the
// reason.
func TestLoadRefusesUnbuiltField(t *testing.T) {
	p := writeFile(t, t.TempDir(), "config.yaml", header+"volumePluginDir: /opt/flex\n")
	_, err := Load([]string{"--config", p})
	if err == nil || !strings.Contains(err.Error(), `volumePluginDir: is set to "/opt/flex", which nodelet does not support: nodelet has no FlexVolume support`) {
		t.Errorf("got %v, want the volumePluginDir refusal", err)
	}
}
