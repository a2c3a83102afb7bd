package config

import (
	"strings"
	"testing"

	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"
)

func TestServingWarnings(t *testing.T) {
	secureDoc := header + `authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
authorization: {mode: Webhook}
`
	tests := []struct {
		name      string
		args      func(dir string) []string
		mod       func(*kubeletconfigv1beta1.KubeletConfiguration)
		settings  []string
		flagsOnly bool
	}{
		{name: "flags-only legacy defaults on 0.0.0.0", args: func(string) []string { return nil },
			settings: []string{"authentication.anonymous.enabled", "authorization.mode", "readOnlyPort"}, flagsOnly: true},
		{name: "flags-only on loopback", args: func(string) []string { return nil },
			mod: func(kc *kubeletconfigv1beta1.KubeletConfiguration) { kc.Address = "127.0.0.1" }},
		{name: "flags-only on IPv6 loopback", args: func(string) []string { return nil },
			mod: func(kc *kubeletconfigv1beta1.KubeletConfiguration) { kc.Address = "::1" }},
		{name: "flags-only on an IPv6 wildcard, HTTPS port off", args: func(string) []string { return nil },
			mod:      func(kc *kubeletconfigv1beta1.KubeletConfiguration) { kc.Address, kc.Port = "::", 0 },
			settings: []string{"readOnlyPort"}, flagsOnly: true},
		{name: "config file, secure", args: func(dir string) []string { return []string{"--config=" + writeFile(t, dir, "c.yaml", secureDoc)} }},
		{name: "config file, anonymous on a node IP", args: func(dir string) []string { return []string{"--config=" + writeFile(t, dir, "c.yaml", secureDoc)} },
			mod: func(kc *kubeletconfigv1beta1.KubeletConfiguration) {
				kc.Address, kc.Authentication.Anonymous.Enabled = "10.0.0.5", ptr.To(true)
			},
			settings: []string{"authentication.anonymous.enabled"}},
		{name: "config file, AlwaysAllow, empty address", args: func(dir string) []string { return []string{"--config=" + writeFile(t, dir, "c.yaml", secureDoc)} },
			mod: func(kc *kubeletconfigv1beta1.KubeletConfiguration) {
				kc.Address, kc.Authorization.Mode = "", kubeletconfigv1beta1.KubeletAuthorizationModeAlwaysAllow
			},
			settings: []string{"authorization.mode"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := mustLoad(t, tc.args(t.TempDir())...)
			if tc.mod != nil {
				tc.mod(o.Config)
			}
			ws := ServingWarnings(o)
			var got []string
			for _, w := range ws {
				got = append(got, w.Setting)
				if w.Message == "" || w.Address == "" || !strings.Contains(w.Fix, "set "+w.Setting+": ") {
					t.Errorf("%s: incomplete warning %+v", w.Setting, w)
				}
				if strings.Contains(w.Fix, "without --config") != tc.flagsOnly {
					t.Errorf("%s: fix %q; flags-only mode named: want %v", w.Setting, w.Fix, tc.flagsOnly)
				}
			}
			if strings.Join(got, ",") != strings.Join(tc.settings, ",") {
				t.Errorf("warnings for %v, want %v", got, tc.settings)
			}
		})
	}
	// The address served is named with its port.
	if ws := ServingWarnings(mustLoad(t)); len(ws) == 0 || ws[0].Address != "0.0.0.0:10250" {
		t.Errorf("flags-only warnings %+v, want the first on 0.0.0.0:10250", ws)
	}
}

// The shipped samples must not trip the warning: the standalone one serves
// anonymous + AlwaysAllow, but on loopback only.
func TestServingWarningsDeploySamples(t *testing.T) {
	for _, f := range []string{"../deploy/config.yaml", "../deploy/standalone-config.yaml"} {
		if ws := ServingWarnings(mustLoad(t, "--config", f)); len(ws) != 0 {
			t.Errorf("%s: %+v", f, ws)
		}
	}
}
