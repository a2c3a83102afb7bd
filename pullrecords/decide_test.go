package pullrecords

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
)

const (
	appImage = "reg.example.com/team/app:1.0"
	appName  = "reg.example.com/team/app"
	appRef   = "sha256:0123456789abcdef"
)

var (
	secretA        = kubeletconfigv1beta1.ImagePullSecret{Namespace: "tenant-a", Name: "pull", UID: "uid-a", CredentialHash: "hash-a"}
	secretACopy    = kubeletconfigv1beta1.ImagePullSecret{Namespace: "tenant-d", Name: "copy", UID: "uid-d", CredentialHash: "hash-a"}
	secretARotated = kubeletconfigv1beta1.ImagePullSecret{Namespace: "tenant-a", Name: "pull", UID: "uid-a", CredentialHash: "hash-a2"}
	secretB        = kubeletconfigv1beta1.ImagePullSecret{Namespace: "tenant-b", Name: "pull", UID: "uid-b", CredentialHash: "hash-b"}
)

func record(mapping map[string]kubeletconfigv1beta1.ImagePullCredentials) *kubeletconfigv1beta1.ImagePulledRecord {
	return &kubeletconfigv1beta1.ImagePulledRecord{ImageRef: appRef, CredentialMapping: mapping}
}

func withSecrets(s ...kubeletconfigv1beta1.ImagePullSecret) *kubeletconfigv1beta1.ImagePulledRecord {
	return record(map[string]kubeletconfigv1beta1.ImagePullCredentials{appName: {KubernetesSecrets: s}})
}

func mustPolicy(t *testing.T, mode kubeletconfigv1beta1.ImagePullCredentialsVerificationPolicy, allowlist ...string) Policy {
	t.Helper()
	p, err := NewPolicy(mode, allowlist)
	if err != nil {
		t.Fatalf("NewPolicy(%s, %v): %v", mode, allowlist, err)
	}
	return p
}

func TestDecide(t *testing.T) {
	const (
		never       = kubeletconfigv1beta1.NeverVerify
		preloaded   = kubeletconfigv1beta1.NeverVerifyPreloadedImages
		allowlisted = kubeletconfigv1beta1.NeverVerifyAllowlistedImages
		always      = kubeletconfigv1beta1.AlwaysVerify
	)
	full := make([]kubeletconfigv1beta1.ImagePullSecret, learnLimit)
	for i := range full {
		full[i] = kubeletconfigv1beta1.ImagePullSecret{Namespace: "ns", Name: fmt.Sprint(i), UID: fmt.Sprint(i), CredentialHash: fmt.Sprint("h", i)}
	}
	full[0] = secretA
	public := record(map[string]kubeletconfigv1beta1.ImagePullCredentials{appName: {NodePodsAccessible: true}})
	tests := []struct {
		name       string
		mode       kubeletconfigv1beta1.ImagePullCredentialsVerificationPolicy
		allowlist  []string
		pullPolicy v1.PullPolicy
		image      string // appImage when empty
		absent     bool
		byKubelet  bool
		unreadable bool
		rec        *kubeletconfigv1beta1.ImagePulledRecord
		pod        []kubeletconfigv1beta1.ImagePullSecret
		want       Action
		wantLearn  *kubeletconfigv1beta1.ImagePullSecret
	}{
		// Whatever the policy: Always pulls, an absent image is pulled or refused.
		{name: "Always pulls even a preloaded image", mode: never, pullPolicy: v1.PullAlways, want: Pull},
		{name: "absent, IfNotPresent", mode: preloaded, absent: true, want: Pull},
		{name: "absent, Never", mode: preloaded, pullPolicy: v1.PullNever, absent: true, want: RefuseNeverPull},

		// NeverVerify: the old behaviour, but unreadable records still fail safe as upstream.
		{name: "NeverVerify: private image, pod without secret", mode: never, byKubelet: true, rec: withSecrets(secretA), want: UsePresent},
		{name: "NeverVerify: unreadable records", mode: never, unreadable: true, want: Pull},
		{name: "NeverVerify: unreadable records, Never", mode: never, pullPolicy: v1.PullNever, unreadable: true, want: RefuseNeverPull},

		// NeverVerifyPreloadedImages (the default).
		{name: "Preloaded: preloaded image", mode: preloaded, want: UsePresent},
		{name: "Preloaded: preloaded image, Never", mode: preloaded, pullPolicy: v1.PullNever, want: UsePresent},
		{name: "Preloaded: pull intent only (interrupted pull)", mode: preloaded, byKubelet: true, want: Pull},
		{name: "Preloaded: record without credentials", mode: preloaded, byKubelet: true, rec: record(nil), pod: []kubeletconfigv1beta1.ImagePullSecret{secretA}, want: Pull},
		{name: "Preloaded: private image, pod without secret", mode: preloaded, byKubelet: true, rec: withSecrets(secretA), want: Pull},
		{name: "Preloaded: private image, pod without secret, Never", mode: preloaded, pullPolicy: v1.PullNever, byKubelet: true, rec: withSecrets(secretA), want: RefuseNeverPull},
		{name: "Preloaded: private image, another tenant's secret", mode: preloaded, byKubelet: true, rec: withSecrets(secretA), pod: []kubeletconfigv1beta1.ImagePullSecret{secretB}, want: Pull},
		{name: "Preloaded: private image, the same secret", mode: preloaded, byKubelet: true, rec: withSecrets(secretA), pod: []kubeletconfigv1beta1.ImagePullSecret{secretA}, want: UsePresent},
		{name: "Preloaded: the same secret, Never", mode: preloaded, pullPolicy: v1.PullNever, byKubelet: true, rec: withSecrets(secretA), pod: []kubeletconfigv1beta1.ImagePullSecret{secretA}, want: UsePresent},
		{name: "Preloaded: one of the pod's secrets matches", mode: preloaded, byKubelet: true, rec: withSecrets(secretA), pod: []kubeletconfigv1beta1.ImagePullSecret{secretB, secretA}, want: UsePresent},
		{name: "Preloaded: same credentials in another secret: learned", mode: preloaded, byKubelet: true, rec: withSecrets(secretA), pod: []kubeletconfigv1beta1.ImagePullSecret{secretACopy}, want: UsePresent, wantLearn: &secretACopy},
		{name: "Preloaded: rotated secret: learned", mode: preloaded, byKubelet: true, rec: withSecrets(secretA), pod: []kubeletconfigv1beta1.ImagePullSecret{secretARotated}, want: UsePresent, wantLearn: &secretARotated},
		{name: "Preloaded: full record, same credentials: used, not learned", mode: preloaded, byKubelet: true, rec: withSecrets(full...), pod: []kubeletconfigv1beta1.ImagePullSecret{secretACopy}, want: UsePresent},
		{name: "Preloaded: full record, rotated secret: verified", mode: preloaded, byKubelet: true, rec: withSecrets(full...), pod: []kubeletconfigv1beta1.ImagePullSecret{secretARotated}, want: Pull},
		{name: "Preloaded: an empty recorded hash never matches", mode: preloaded, byKubelet: true,
			rec: withSecrets(kubeletconfigv1beta1.ImagePullSecret{Namespace: "x", Name: "y", UID: "z"}),
			pod: []kubeletconfigv1beta1.ImagePullSecret{{Namespace: "p", Name: "q", UID: "r"}}, want: Pull},
		{name: "Preloaded: pulled without pod credentials", mode: preloaded, byKubelet: true, rec: public, want: UsePresent},
		{name: "Preloaded: same image ID pulled under another name", mode: preloaded, byKubelet: true, image: "mirror.example.com/app:1.0", rec: public, want: Pull},
		{name: "Preloaded: digest reference maps to the same name", mode: preloaded, byKubelet: true, image: appName + "@sha256:" + strings.Repeat("a", 64), rec: withSecrets(secretA), pod: []kubeletconfigv1beta1.ImagePullSecret{secretA}, want: UsePresent},
		{name: "Preloaded: unreadable records", mode: preloaded, unreadable: true, pod: []kubeletconfigv1beta1.ImagePullSecret{secretA}, want: Pull},
		{name: "Preloaded: invalid image name", mode: preloaded, byKubelet: true, image: "Reg.example.com/Team/App:1", rec: public, want: Pull},

		// NeverVerifyAllowlistedImages.
		{name: "Allowlisted: preloaded, exact entry", mode: allowlisted, allowlist: []string{appName}, want: UsePresent},
		{name: "Allowlisted: preloaded, not listed", mode: allowlisted, allowlist: []string{"reg.example.com/team/other"}, want: Pull},
		{name: "Allowlisted: preloaded, not listed, Never", mode: allowlisted, pullPolicy: v1.PullNever, allowlist: []string{"reg.example.com/team/other"}, want: RefuseNeverPull},
		{name: "Allowlisted: preloaded, org wildcard", mode: allowlisted, allowlist: []string{"reg.example.com/team/*"}, want: UsePresent},
		{name: "Allowlisted: preloaded, host wildcard", mode: allowlisted, allowlist: []string{"reg.example.com/*"}, want: UsePresent},
		{name: "Allowlisted: wildcards match whole segments", mode: allowlisted, allowlist: []string{"reg.example.com/te/*"}, want: Pull},
		{name: "Allowlisted: listed image pulled with a secret (upstream exempts it too)", mode: allowlisted, allowlist: []string{appName}, byKubelet: true, rec: withSecrets(secretA), want: UsePresent},
		{name: "Allowlisted: familiar name matches familiar entry", mode: allowlisted, allowlist: []string{"alpine"}, image: "alpine:3.20", want: UsePresent},
		{name: "Allowlisted: familiar name is not normalized", mode: allowlisted, allowlist: []string{"docker.io/library/alpine"}, image: "alpine:3.20", want: Pull},
		{name: "Allowlisted: not listed but pulled with the pod's secret", mode: allowlisted, byKubelet: true, rec: withSecrets(secretA), pod: []kubeletconfigv1beta1.ImagePullSecret{secretA}, want: UsePresent},

		// AlwaysVerify.
		{name: "AlwaysVerify: preloaded image", mode: always, want: Pull},
		{name: "AlwaysVerify: preloaded image, Never", mode: always, pullPolicy: v1.PullNever, want: RefuseNeverPull},
		{name: "AlwaysVerify: the same secret", mode: always, byKubelet: true, rec: withSecrets(secretA), pod: []kubeletconfigv1beta1.ImagePullSecret{secretA}, want: UsePresent},
		{name: "AlwaysVerify: pulled without pod credentials", mode: always, byKubelet: true, rec: public, want: UsePresent},
		{name: "AlwaysVerify: pod without secret", mode: always, byKubelet: true, rec: withSecrets(secretA), want: Pull},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := Input{
				Policy:            mustPolicy(t, tt.mode, tt.allowlist...),
				PullPolicy:        tt.pullPolicy,
				Image:             tt.image,
				Present:           !tt.absent,
				PulledByKubelet:   tt.byKubelet,
				RecordsUnreadable: tt.unreadable,
				Record:            tt.rec,
				PodSecrets:        tt.pod,
			}
			if in.PullPolicy == "" {
				in.PullPolicy = v1.PullIfNotPresent
			}
			if in.Image == "" {
				in.Image = appImage
			}
			got := Decide(in)
			if got.Action != tt.want {
				t.Errorf("Decide() = %s (%s), want %s", got.Action, got.Reason, tt.want)
			}
			if !reflect.DeepEqual(got.Learn, tt.wantLearn) {
				t.Errorf("Learn = %+v, want %+v", got.Learn, tt.wantLearn)
			}
		})
	}
}

func TestNewPolicy(t *testing.T) {
	p, err := NewPolicy("", nil)
	if err != nil || p.Mode() != kubeletconfigv1beta1.NeverVerifyPreloadedImages {
		t.Errorf(`NewPolicy("") = %v, %v; want the NeverVerifyPreloadedImages default`, p.Mode(), err)
	}
	if _, err := NewPolicy("Sometimes", nil); err == nil {
		t.Error("an unknown policy was accepted")
	}
	for _, bad := range []string{"", "*", "/*", "reg.example.com/", "reg.example.com/te*", "reg.example.com/*/app",
		"reg.example.com/app:1", "reg.example.com/app@sha256:" + strings.Repeat("a", 64), " reg.example.com/app", "Reg.Example.com/App"} {
		if _, err := NewPolicy(kubeletconfigv1beta1.NeverVerifyAllowlistedImages, []string{bad}); err == nil {
			t.Errorf("allowlist entry %q was accepted", bad)
		}
		if errs := ValidateAllowlist([]string{"ok.example.com/app", bad}); errs[1] == nil || len(errs) != 1 {
			t.Errorf("ValidateAllowlist(%q) = %v, want one error at index 1", bad, errs)
		}
	}
	for _, good := range []string{"alpine", "reg.example.com/app", "reg.example.com:5000/team/app", "reg.example.com/*", "localhost:5000/team/*"} {
		if errs := ValidateAllowlist([]string{good}); len(errs) != 0 {
			t.Errorf("ValidateAllowlist(%q) = %v", good, errs)
		}
	}
}

func TestTrimTagDigest(t *testing.T) {
	digest := "sha256:" + strings.Repeat("0a", 32)
	for in, want := range map[string]string{
		"alpine":                            "alpine",
		"alpine:3.20":                       "alpine",
		"alpine@" + digest:                  "alpine",
		"alpine:3.20@" + digest:             "alpine",
		"docker.io/taghere/image:taghere":   "docker.io/taghere/image",
		"localhost:5000/app:v1":             "localhost:5000/app",
		"reg.example.com:443/a/b/c/app":     "reg.example.com:443/a/b/c/app",
		"127.0.0.1:5000/busybox:e2e":        "127.0.0.1:5000/busybox",
		"reg.example.com/team/app:1.0-rc_1": "reg.example.com/team/app",
	} {
		got, err := TrimTagDigest(in)
		if err != nil || got != want {
			t.Errorf("TrimTagDigest(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "reg.example.com/team/", "reg.example.com/team/:tag", "reg.example.com/team/@" + digest, "app@sha256:short", "app:", "team/UPPER", "a/../b"} {
		if got, err := TrimTagDigest(bad); err == nil {
			t.Errorf("TrimTagDigest(%q) = %q, want an error", bad, got)
		}
	}
}

func TestMerge(t *testing.T) {
	now := time.Unix(1700000000, 0)
	old := metav1.NewTime(now.Add(-time.Hour))
	stamp := func(r *kubeletconfigv1beta1.ImagePulledRecord) *kubeletconfigv1beta1.ImagePulledRecord {
		r.LastUpdatedTime = old
		return r
	}
	secrets := func(s ...kubeletconfigv1beta1.ImagePullSecret) *kubeletconfigv1beta1.ImagePullCredentials {
		return &kubeletconfigv1beta1.ImagePullCredentials{KubernetesSecrets: s}
	}
	node := &kubeletconfigv1beta1.ImagePullCredentials{NodePodsAccessible: true}
	tests := []struct {
		name        string
		rec         *kubeletconfigv1beta1.ImagePulledRecord
		creds       *kubeletconfigv1beta1.ImagePullCredentials
		wantChanged bool
		wantMapping map[string]kubeletconfigv1beta1.ImagePullCredentials
	}{
		{"new record with a secret", nil, secrets(secretA), true, map[string]kubeletconfigv1beta1.ImagePullCredentials{appName: *secrets(secretA)}},
		{"new record without credentials", nil, nil, true, map[string]kubeletconfigv1beta1.ImagePullCredentials{}},
		{"nil credentials change nothing", stamp(withSecrets(secretA)), nil, false, withSecrets(secretA).CredentialMapping},
		{"empty credentials change nothing", stamp(withSecrets(secretA)), &kubeletconfigv1beta1.ImagePullCredentials{}, false, withSecrets(secretA).CredentialMapping},
		{"first credentials for the image", stamp(record(nil)), secrets(secretA), true, withSecrets(secretA).CredentialMapping},
		{"node-accessible stays", stamp(record(map[string]kubeletconfigv1beta1.ImagePullCredentials{appName: *node})), secrets(secretA), false, map[string]kubeletconfigv1beta1.ImagePullCredentials{appName: *node}},
		{"node-accessible replaces secrets", stamp(withSecrets(secretA)), node, true, map[string]kubeletconfigv1beta1.ImagePullCredentials{appName: *node}},
		{"same secret again", stamp(withSecrets(secretA)), secrets(secretA), false, withSecrets(secretA).CredentialMapping},
		{"rotated secret replaces its hash", stamp(withSecrets(secretA)), secrets(secretARotated), true, withSecrets(secretARotated).CredentialMapping},
		{"secrets are unioned and sorted", stamp(withSecrets(secretB)), secrets(secretACopy, secretA), true, withSecrets(secretA, secretB, secretACopy).CredentialMapping},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := tt.rec.DeepCopy()
			got, changed, err := Merge(tt.rec, appRef, appImage, tt.creds, now)
			if err != nil {
				t.Fatal(err)
			}
			if changed != tt.wantChanged {
				t.Errorf("changed = %t, want %t", changed, tt.wantChanged)
			}
			if !reflect.DeepEqual(got.CredentialMapping, tt.wantMapping) {
				t.Errorf("mapping = %+v, want %+v", got.CredentialMapping, tt.wantMapping)
			}
			if got.ImageRef != appRef {
				t.Errorf("imageRef = %q", got.ImageRef)
			}
			if changed && !got.LastUpdatedTime.Time.Equal(now) {
				t.Errorf("lastUpdatedTime = %v, want %v", got.LastUpdatedTime, now)
			}
			if !reflect.DeepEqual(tt.rec, before) {
				t.Errorf("Merge modified its input: %+v, was %+v", tt.rec, before)
			}
		})
	}
	if _, _, err := Merge(nil, appRef, "Bad/Name:1", secrets(secretA), now); err == nil {
		t.Error("Merge accepted an invalid image name")
	}
}
