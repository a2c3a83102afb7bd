package credentialprovider

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeletconfigv1 "k8s.io/kubelet/config/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
)

func TestURLMatches(t *testing.T) {
	for _, tc := range []struct {
		pattern, image string
		want           bool
	}{
		{"123456789.dkr.ecr.us-east-1.amazonaws.com", "123456789.dkr.ecr.us-east-1.amazonaws.com/app", true},
		{"*.dkr.ecr.*.amazonaws.com", "123456789.dkr.ecr.us-east-1.amazonaws.com/app", true},
		{"*.azurecr.io", "team.azurecr.io/app", true},
		{"*.io", "team.azurecr.io/app", false}, // a glob is one label
		{"k8s.*", "k8s.io/app", true},
		{"app*.k8s.io", "app1.k8s.io/x", true},
		{"gcr.io", "gcr.io/project/app", true},
		{"gcr.io", "us.gcr.io/project/app", false},
		{"registry.io:8080/path", "registry.io:8080/path/app", true},
		{"registry.io:8080/path", "registry.io:8080/other/app", false},
		{"registry.io:8080", "registry.io/app", false},
		{"registry.io", "registry.io:8080/app", false},
		{"127.0.0.1:5000", "127.0.0.1:5000/busybox", true},
	} {
		if got := URLMatches(tc.pattern, tc.image); got != tc.want {
			t.Errorf("URLMatches(%q, %q) = %v, want %v", tc.pattern, tc.image, got, tc.want)
		}
	}
}

func provider(name string, mod ...func(*kubeletconfigv1.CredentialProvider)) kubeletconfigv1.CredentialProvider {
	p := kubeletconfigv1.CredentialProvider{
		Name: name, MatchImages: []string{"*.example.com", "127.0.0.1:5000"},
		DefaultCacheDuration: &metav1.Duration{Duration: time.Minute}, APIVersion: protocolV1,
	}
	for _, m := range mod {
		m(&p)
	}
	return p
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name      string
		providers []kubeletconfigv1.CredentialProvider
		want      string
	}{
		{"none", nil, "at least 1 item in plugins is required"},
		{"no name", []kubeletconfigv1.CredentialProvider{provider("")}, "providers[0].name: name is required"},
		{"slash", []kubeletconfigv1.CredentialProvider{provider("../x")}, "provider name cannot contain"},
		{"duplicate", []kubeletconfigv1.CredentialProvider{provider("a"), provider("a")}, `providers[1].name: duplicate provider name "a"`},
		{"no matchImages", []kubeletconfigv1.CredentialProvider{provider("a", func(p *kubeletconfigv1.CredentialProvider) { p.MatchImages = nil })}, "at least 1 item in matchImages is required"},
		{"glob in port", []kubeletconfigv1.CredentialProvider{provider("a", func(p *kubeletconfigv1.CredentialProvider) { p.MatchImages = []string{"reg.io:*"} })}, "providers[0].matchImages[0]"},
		{"scheme", []kubeletconfigv1.CredentialProvider{provider("a", func(p *kubeletconfigv1.CredentialProvider) { p.MatchImages = []string{"https://reg.io"} })}, "providers[0].matchImages[0]"},
		{"no cache duration", []kubeletconfigv1.CredentialProvider{provider("a", func(p *kubeletconfigv1.CredentialProvider) { p.DefaultCacheDuration = nil })}, "defaultCacheDuration is required"},
		{"negative cache duration", []kubeletconfigv1.CredentialProvider{provider("a", func(p *kubeletconfigv1.CredentialProvider) { p.DefaultCacheDuration.Duration = -time.Second })}, "greater than or equal to 0"},
		{"no apiVersion", []kubeletconfigv1.CredentialProvider{provider("a", func(p *kubeletconfigv1.CredentialProvider) { p.APIVersion = "" })}, "apiVersion is required"},
		{"bad apiVersion", []kubeletconfigv1.CredentialProvider{provider("a", func(p *kubeletconfigv1.CredentialProvider) { p.APIVersion = "credentialprovider.kubelet.k8s.io/v2" })}, "supported values are"},
		{"token attributes", []kubeletconfigv1.CredentialProvider{provider("a", func(p *kubeletconfigv1.CredentialProvider) {
			p.TokenAttributes = &kubeletconfigv1.ServiceAccountTokenAttributes{ServiceAccountTokenAudience: "aud", CacheType: "Token", RequireServiceAccount: ptr.To(true)}
		})}, "providers[0].tokenAttributes: tokenAttributes (service account tokens for image pulls) is not built into nodelet"},
		{"good", []kubeletconfigv1.CredentialProvider{provider("a"), provider("b", func(p *kubeletconfigv1.CredentialProvider) { p.APIVersion = protocolV1beta1 })}, ""},
	} {
		err := Validate(tc.providers)
		if tc.want == "" {
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Validate = %v, want %q", tc.name, err, tc.want)
		}
	}
}

const configYAML = `apiVersion: kubelet.config.k8s.io/v1
kind: CredentialProviderConfig
providers:
- name: test-provider
  matchImages: ["*.example.com", "127.0.0.1:5000"]
  defaultCacheDuration: 1m
  apiVersion: credentialprovider.kubelet.k8s.io/v1
  args: ["--mode=test"]
  env:
  - name: PROVIDER_USER
    value: alice
`

func writeConfig(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestReadConfig(t *testing.T) {
	dir := t.TempDir()
	one := writeConfig(t, dir, "10-test.yaml", configYAML)
	got, err := ReadConfig(one)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Name != "test-provider" || got[0].DefaultCacheDuration.Duration != time.Minute ||
		len(got[0].Args) != 1 || len(got[0].Env) != 1 || got[0].Env[0].Value != "alice" {
		t.Errorf("providers %+v", got)
	}
	// A directory: every file, in lexical order.
	writeConfig(t, dir, "20-other.json", `{"apiVersion":"kubelet.config.k8s.io/v1","kind":"CredentialProviderConfig","providers":[`+
		`{"name":"other-provider","matchImages":["reg.io"],"defaultCacheDuration":"0s","apiVersion":"credentialprovider.kubelet.k8s.io/v1"}]}`)
	got, err = ReadConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Name != "test-provider" || got[1].Name != "other-provider" {
		t.Errorf("providers of the directory %+v", got)
	}
	for content, want := range map[string]string{
		strings.Replace(configYAML, "  args:", "  argz:", 1):                                           `unknown field "argz"`,
		strings.Replace(configYAML, "kind: CredentialProviderConfig", "kind: KubeletConfiguration", 1): `want kubelet.config.k8s.io/v1 CredentialProviderConfig`,
		"providers: [": "",
	} {
		_, err := ReadConfig(writeConfig(t, t.TempDir(), "bad.yaml", content))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ReadConfig(%q) = %v, want %q", content, err, want)
		}
	}
}

func TestLoadRefusals(t *testing.T) {
	dir := t.TempDir()
	cfg := writeConfig(t, dir, "config.yaml", configYAML)
	for _, tc := range []struct {
		cfg, bin, want string
	}{
		{cfg, "", "--image-credential-provider-bin-dir is required"},
		{cfg, filepath.Join(dir, "nope"), "plugin binary directory " + filepath.Join(dir, "nope") + " did not exist"},
		{cfg, dir, "plugin binary executable " + filepath.Join(dir, "test-provider") + " did not exist"},
		{filepath.Join(dir, "missing.yaml"), binDir, "reading credential provider config"},
		{writeConfig(t, dir, "token.yaml", configYAML+"  tokenAttributes:\n    serviceAccountTokenAudience: aud\n    cacheType: Token\n    requireServiceAccount: true\n"), binDir, "tokenAttributes"},
	} {
		if _, err := Load(tc.cfg, tc.bin); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Load(%s, %s) = %v, want %q", tc.cfg, tc.bin, err, tc.want)
		}
	}
	p, err := Load(cfg, binDir)
	if err != nil {
		t.Fatal(err)
	}
	if names := p.Names(); len(names) != 1 || names[0] != "test-provider" {
		t.Errorf("names %v", names)
	}
}

// pluginRig is one provider running the test plugin with env, and the log of its runs.
type pluginRig struct {
	t     *testing.T
	p     *Providers
	clock *clocktesting.FakeClock
	log   string
	reg   *prometheus.Registry
}

func newPluginRig(t *testing.T, env map[string]string, mods ...func(*kubeletconfigv1.CredentialProvider)) *pluginRig {
	t.Helper()
	r := &pluginRig{t: t, clock: clocktesting.NewFakeClock(time.Unix(1e9, 0)), log: filepath.Join(t.TempDir(), "runs"), reg: prometheus.NewRegistry()}
	cfg := provider("test-provider", mods...)
	cfg.Args = []string{"--mode=test"}
	cfg.Env = []kubeletconfigv1.ExecEnvVar{{Name: "PROVIDER_LOG", Value: r.log}, {Name: "PROVIDER_USER", Value: "alice"}, {Name: "PROVIDER_PASSWORD", Value: "s3cret"}}
	for k, v := range env {
		cfg.Env = append(cfg.Env, kubeletconfigv1.ExecEnvVar{Name: k, Value: v})
	}
	if err := Validate([]kubeletconfigv1.CredentialProvider{cfg}); err != nil {
		t.Fatal(err)
	}
	bins, err := binaries(binDir, []kubeletconfigv1.CredentialProvider{cfg})
	if err != nil {
		t.Fatal(err)
	}
	r.p = newProviders([]kubeletconfigv1.CredentialProvider{cfg}, bins, WithClock(r.clock), WithMetrics(r.reg))
	return r
}

func (r *pluginRig) runs() []string {
	data, err := os.ReadFile(r.log)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		r.t.Fatal(err)
	}
	return strings.Split(strings.TrimSpace(string(data)), "\n")
}

// provide asks for image and checks the one credential it must get.
func (r *pluginRig) provide(image string) {
	r.t.Helper()
	got := r.p.Provide(context.Background(), image)
	if len(got) != 1 || got[0].Username != "alice" || got[0].Password != "s3cret" {
		r.t.Fatalf("Provide(%s) = %+v, want alice's credential", image, got)
	}
}

func TestProvideExecsThePlugin(t *testing.T) {
	r := newPluginRig(t, nil)
	got := r.p.Provide(context.Background(), "reg.example.com/team/app")
	if len(got) != 1 || got[0] != (Credential{Pattern: "reg.example.com", Username: "alice", Password: "s3cret"}) {
		t.Fatalf("Provide = %+v", got)
	}
	// The request names the repository; the config's args reach the plugin.
	if runs := r.runs(); len(runs) != 1 || runs[0] != "CredentialProviderRequest reg.example.com/team/app --mode=test" {
		t.Errorf("runs %q", runs)
	}
	// An image no matchImages entry covers never runs the plugin.
	if got := r.p.Provide(context.Background(), "docker.io/library/busybox"); len(got) != 0 {
		t.Errorf("Provide of an unmatched image = %+v", got)
	}
	if n := len(r.runs()); n != 1 {
		t.Errorf("%d runs after an unmatched image, want 1", n)
	}
}

// The answer is cached under the response's cacheKeyType for its
// cacheDuration, else the provider's defaultCacheDuration; 0 caches nothing.
func TestProvideCache(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		// images asked in turn, and how many runs there must be after each
		images []string
		runs   []int
		// after the default (1m) or the response's duration passes, one more run
		ttl time.Duration
	}{
		{"image key", nil, []string{"a.example.com/x", "a.example.com/x", "a.example.com/y"}, []int{1, 1, 2}, time.Minute},
		{"registry key", map[string]string{"PROVIDER_CACHE_KEY_TYPE": "Registry"}, []string{"a.example.com/x", "a.example.com/y", "b.example.com/x"}, []int{1, 1, 2}, time.Minute},
		{"global key", map[string]string{"PROVIDER_CACHE_KEY_TYPE": "Global", "PROVIDER_PATTERN": "*.example.com"}, []string{"a.example.com/x", "b.example.com/y"}, []int{1, 1}, time.Minute},
		{"response duration", map[string]string{"PROVIDER_CACHE_DURATION": "10s"}, []string{"a.example.com/x", "a.example.com/x"}, []int{1, 1}, 10 * time.Second},
		{"no caching", map[string]string{"PROVIDER_CACHE_DURATION": "0s"}, []string{"a.example.com/x", "a.example.com/x"}, []int{1, 2}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newPluginRig(t, tc.env)
			for i, img := range tc.images {
				r.provide(img)
				if n := len(r.runs()); n != tc.runs[i] {
					t.Fatalf("after %s: %d runs, want %d", img, n, tc.runs[i])
				}
			}
			if tc.ttl == 0 {
				return
			}
			n := len(r.runs())
			r.clock.Step(tc.ttl - time.Second)
			r.provide(tc.images[0])
			if len(r.runs()) != n {
				t.Fatalf("re-run before the cache duration (%v) passed", tc.ttl)
			}
			r.clock.Step(time.Second)
			r.provide(tc.images[0])
			if len(r.runs()) != n+1 {
				t.Fatalf("no re-run once the cache duration (%v) passed", tc.ttl)
			}
		})
	}
}

// A failing plugin, or an answer the kubelet may not use, gives no credentials,
// is not cached, and counts in the errors metric.
func TestProvideErrors(t *testing.T) {
	for name, env := range map[string]map[string]string{
		"exit 1":         {"PROVIDER_FAIL": "no token for you"},
		"wrong version":  {"PROVIDER_API_VERSION": "credentialprovider.kubelet.k8s.io/v1beta1"},
		"bad cache type": {"PROVIDER_CACHE_KEY_TYPE": "Pod"},
	} {
		t.Run(name, func(t *testing.T) {
			r := newPluginRig(t, env)
			for i := 1; i <= 2; i++ {
				if got := r.p.Provide(context.Background(), "a.example.com/x"); len(got) != 0 {
					t.Fatalf("Provide = %+v, want nothing", got)
				}
				if n := len(r.runs()); n != i {
					t.Fatalf("%d runs after %d calls: a failure was cached", n, i)
				}
			}
			if got := testutil.ToFloat64(r.p.errorsTotal.WithLabelValues("test-provider")); got != 2 {
				t.Errorf("kubelet_credential_provider_plugin_errors_total = %v, want 2", got)
			}
		})
	}
}

// Several providers matching one image: every one runs, earlier providers'
// credentials first.
func TestProvideSeveralProviders(t *testing.T) {
	log := filepath.Join(t.TempDir(), "runs")
	mk := func(name, user string) kubeletconfigv1.CredentialProvider {
		p := provider(name)
		p.Env = []kubeletconfigv1.ExecEnvVar{{Name: "PROVIDER_LOG", Value: log}, {Name: "PROVIDER_USER", Value: user}, {Name: "PROVIDER_PASSWORD", Value: "p"}}
		return p
	}
	cfgs := []kubeletconfigv1.CredentialProvider{mk("other-provider", "first"), mk("test-provider", "second")}
	third := mk("third-provider", "never")
	third.MatchImages = []string{"elsewhere.io"}
	cfgs = append(cfgs, third)
	bins, err := binaries(binDir, cfgs)
	if err != nil {
		t.Fatal(err)
	}
	got := newProviders(cfgs, bins).Provide(context.Background(), "a.example.com/x")
	if len(got) != 2 || got[0].Username != "first" || got[1].Username != "second" {
		t.Errorf("Provide = %+v, want first's then second's", got)
	}
}
