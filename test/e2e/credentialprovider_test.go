//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/test/e2e/framework"
)

// buildTestProvider builds the test credential provider plugin
// (credentialprovider/testprovider) as dir/name.
func buildTestProvider(t *testing.T, dir, name string) {
	t.Helper()
	out, err := exec.Command("go", "build", "-o", filepath.Join(dir, name), "github.com/nodelet/nodelet/credentialprovider/testprovider").CombinedOutput()
	if err != nil {
		t.Fatalf("building the test credential provider: %v\n%s", err, out)
	}
}

// TestImageCredentialProvider pulls the rig registry's private image with no pull secret,
// through a credential provider plugin (--image-credential-provider-config and
// --image-credential-provider-bin-dir, the exec protocol credentialprovider.kubelet.k8s.io/v1):
// the plugin is run once with the image's repository and its answer cached for the
// registry, so a second pod's pull does not run it again; the pulled image is recorded as
// node-wide (provider credentials), so a third pod without credentials uses it as present.
func TestImageCredentialProvider(t *testing.T) {
	f := framework.New(t)
	ctx := context.Background()
	r := privateRegistry(t, f)
	reg, image := r.host, r.image

	dir := t.TempDir()
	binDir := filepath.Join(dir, "bin")
	buildTestProvider(t, binDir, "rig-registry-provider")
	runs := filepath.Join(dir, "runs")
	cfg := filepath.Join(dir, "credential-providers.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1
kind: CredentialProviderConfig
providers:
- name: rig-registry-provider
  matchImages: [%q]
  defaultCacheDuration: 10m
  apiVersion: credentialprovider.kubelet.k8s.io/v1
  args: ["--e2e"]
  env:
  - {name: PROVIDER_USER, value: %q}
  - {name: PROVIDER_PASSWORD, value: %q}
  - {name: PROVIDER_CACHE_KEY_TYPE, value: Registry}
  - {name: PROVIDER_LOG, value: %q}
`, reg, r.user, r.password, runs)), 0o600); err != nil {
		t.Fatal(err)
	}
	ns := f.NewNamespace()
	startNode(t, f, framework.NodeletOptions{ExtraArgs: []string{
		"--image-credential-provider-config=" + cfg, "--image-credential-provider-bin-dir=" + binDir,
	}})
	pluginRuns := func() []string {
		data, err := os.ReadFile(runs)
		if os.IsNotExist(err) {
			return nil
		}
		if err != nil {
			t.Fatal(err)
		}
		return strings.Split(strings.TrimSpace(string(data)), "\n")
	}
	pod := func(name string, policy v1.PullPolicy) *v1.Pod {
		p := f.BusyboxPod(ns, name, "sh", "-c", "sleep 3600")
		p.Spec.Containers[0].Image, p.Spec.Containers[0].ImagePullPolicy = image, policy
		return p
	}

	f.CreatePod(ctx, pod("first", v1.PullAlways))
	f.WaitForPodReady(ctx, ns, "first", 2*time.Minute)
	pulled := waitForEvent(ctx, t, f, ns, "first", "Pulled", 30*time.Second)
	if !strings.HasPrefix(pulled.Message, fmt.Sprintf("Successfully pulled image %q in ", image)) {
		t.Errorf("Pulled event %q", pulled.Message)
	}
	repo := image // the plugin is asked for the repository: no tag
	if i := strings.LastIndex(repo, ":"); i > strings.LastIndex(repo, "/") {
		repo = repo[:i]
	}
	if got := pluginRuns(); len(got) != 1 || got[0] != "CredentialProviderRequest "+repo+" --e2e" {
		t.Errorf("plugin runs %q, want one with the image's repository and the config's args", got)
	}

	f.CreatePod(ctx, pod("second", v1.PullAlways))
	f.WaitForPodReady(ctx, ns, "second", 2*time.Minute)
	if got := pluginRuns(); len(got) != 1 {
		t.Errorf("plugin runs %q after a second pull: its Registry answer was not cached", got)
	}

	f.CreatePod(ctx, pod("present", v1.PullIfNotPresent))
	f.WaitForPodReady(ctx, ns, "present", 2*time.Minute)
	ev := waitForEvent(ctx, t, f, ns, "present", "Pulled", 30*time.Second)
	if want := fmt.Sprintf("Container image %q already present on machine and can be accessed by the pod", image); ev.Message != want {
		t.Errorf("Pulled event of a pod without credentials %q, want %q (provider credentials are node-wide)", ev.Message, want)
	}
}

// TestImageCredentialProviderRefusals: a provider config nodelet cannot honour stops the start
// naming why: tokenAttributes (service account token mode, not built) and a plugin missing
// from the bin dir.
func TestImageCredentialProviderRefusals(t *testing.T) {
	dir := t.TempDir()
	const base = `apiVersion: kubelet.config.k8s.io/v1
kind: CredentialProviderConfig
providers:
- name: rig-registry-provider
  matchImages: ["127.0.0.1:5000"]
  defaultCacheDuration: 1m
  apiVersion: credentialprovider.kubelet.k8s.io/v1
`
	buildTestProvider(t, dir, "rig-registry-provider")
	for _, tc := range []struct{ name, config, bin, want string }{
		{"token", base + "  tokenAttributes:\n    serviceAccountTokenAudience: registry\n    cacheType: Token\n    requireServiceAccount: true\n", dir,
			"providers[0].tokenAttributes: tokenAttributes (service account tokens for image pulls) is not built into nodelet"},
		{"missing", base, filepath.Join(dir, "empty"), "plugin binary executable " + filepath.Join(dir, "empty", "rig-registry-provider") + " did not exist"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := framework.New(t)
			if err := os.MkdirAll(filepath.Join(dir, "empty"), 0o755); err != nil {
				t.Fatal(err)
			}
			cfg := filepath.Join(dir, tc.name+".yaml")
			if err := os.WriteFile(cfg, []byte(tc.config), 0o600); err != nil {
				t.Fatal(err)
			}
			n := f.StartNodelet(framework.NodeletOptions{ExtraArgs: []string{
				"--image-credential-provider-config=" + cfg, "--image-credential-provider-bin-dir=" + tc.bin,
			}})
			if err := n.WaitExit(time.Minute); err == nil {
				t.Fatal("nodelet started")
			}
			if logs := n.Logs(); !strings.Contains(logs, tc.want) {
				t.Errorf("the start-up error does not say %q:\n%s", tc.want, logs)
			}
		})
	}
}
