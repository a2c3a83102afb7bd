package podruntime

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	clocktesting "k8s.io/utils/clock/testing"
)

func TestNormalizeRepo(t *testing.T) {
	for in, want := range map[string]string{
		"busybox":                     "docker.io/library/busybox",
		"busybox:1.36":                "docker.io/library/busybox",
		"user/app":                    "docker.io/user/app",
		"docker.io/busybox":           "docker.io/library/busybox",
		"index.docker.io/user/app:v1": "docker.io/user/app",
		"127.0.0.1:5000/busybox:e2e":  "127.0.0.1:5000/busybox",
		"127.0.0.1:5000/busybox":      "127.0.0.1:5000/busybox",
		"reg.example.com/a/b@sha256:" + strings.Repeat("ab", 32): "reg.example.com/a/b",
		"localhost/app:1":                  "localhost/app",
		"reg.example.com:443/team/app:1.0": "reg.example.com:443/team/app",
		// Refused as InvalidImageName before any pull: no repository, no credential.
		"reg.example.com/a/b@sha256:abcd": "",
		"Reg.example.com/UPPER":           "",
	} {
		if got := normalizeRepo(in); got != want {
			t.Errorf("normalizeRepo(%q) = %q, want %q", in, got, want)
		}
	}
}

func auths(entries map[string]string) map[string]dockerConfigEntry {
	out := map[string]dockerConfigEntry{}
	for loc, user := range entries {
		out[loc] = dockerConfigEntry{Username: user, Password: "pw-" + user}
	}
	return out
}

func TestKeyringLookup(t *testing.T) {
	tests := []struct {
		name    string
		configs []map[string]string // location -> username, one map per secret
		image   string
		want    []string // usernames, in try order
	}{
		{"host match", []map[string]string{{"reg.example.com": "a"}}, "reg.example.com/app:1", []string{"a"}},
		{"scheme and /v1/ ignored", []map[string]string{{"https://reg.example.com/v1/": "a"}}, "reg.example.com/app", []string{"a"}},
		{"http scheme", []map[string]string{{"http://127.0.0.1:5000": "a"}}, "127.0.0.1:5000/busybox:e2e", []string{"a"}},
		{"port must match", []map[string]string{{"127.0.0.1:5001": "a"}}, "127.0.0.1:5000/busybox", nil},
		{"portless key does not match a port", []map[string]string{{"127.0.0.1": "a"}}, "127.0.0.1:5000/busybox", nil},
		{"other host", []map[string]string{{"other.example.com": "a"}}, "reg.example.com/app", nil},
		{"subdomain is not a match", []map[string]string{{"example.com": "a"}}, "reg.example.com/app", nil},
		{"glob host", []map[string]string{{"*.example.com": "a"}}, "reg.example.com/app", []string{"a"}},
		{"path prefix", []map[string]string{{"reg.example.com/team": "a"}}, "reg.example.com/team/app", []string{"a"}},
		{"path prefix mismatch", []map[string]string{{"reg.example.com/team": "a"}}, "reg.example.com/other/app", nil},
		{
			"longest match first, across secrets",
			[]map[string]string{{"reg.example.com": "host"}, {"reg.example.com/team/app": "repo", "reg.example.com/team": "team"}},
			"reg.example.com/team/app:1", []string{"repo", "team", "host"},
		},
		{"docker.io key", []map[string]string{{"docker.io": "a"}}, "busybox", []string{"a"}},
		{"index.docker.io key for a bare image", []map[string]string{{"https://index.docker.io/v1/": "a"}}, "busybox", []string{"a"}},
		{"index.docker.io key for docker.io image", []map[string]string{{"index.docker.io": "a"}}, "docker.io/user/app", []string{"a"}},
		{"docker hub key not for other registry", []map[string]string{{"index.docker.io": "a"}}, "reg.example.com/app", nil},
		{"two secrets same host, both tried", []map[string]string{{"reg.example.com": "a"}, {"reg.example.com": "b"}}, "reg.example.com/app", []string{"a", "b"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var k keyring
			for _, c := range tt.configs {
				if err := k.add(auths(c), nil); err != nil {
					t.Fatal(err)
				}
			}
			var got []string
			for _, a := range k.lookup(normalizeRepo(tt.image)) {
				got = append(got, a.Username)
				if a.Password != "pw-"+a.Username {
					t.Errorf("password of %s = %q", a.Username, a.Password)
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("lookup(%q) = %v, want %v", tt.image, got, tt.want)
			}
		})
	}
}

func TestParseDockerConfig(t *testing.T) {
	b64 := base64.StdEncoding.EncodeToString([]byte("u:p:with:colons"))
	tests := []struct {
		name     string
		data     map[string][]byte
		wantUser string
		wantPass string
		wantErr  bool
	}{
		{"dockerconfigjson user/pass", map[string][]byte{v1.DockerConfigJsonKey: []byte(`{"auths":{"r.io":{"username":"u","password":"p"}}}`)}, "u", "p", false},
		{"dockerconfigjson auth only", map[string][]byte{v1.DockerConfigJsonKey: []byte(`{"auths":{"r.io":{"auth":"` + b64 + `"}}}`)}, "u", "p:with:colons", false},
		{"dockercfg", map[string][]byte{v1.DockerConfigKey: []byte(`{"r.io":{"username":"u","password":"p","email":"e@x"}}`)}, "u", "p", false},
		{"not json", map[string][]byte{v1.DockerConfigJsonKey: []byte(`{`)}, "", "", true},
		{"no known key", map[string][]byte{"token": []byte(`x`)}, "", "", true},
		{"auth not base64", map[string][]byte{v1.DockerConfigJsonKey: []byte(`{"auths":{"r.io":{"auth":"%%%"}}}`)}, "", "", true},
		{"auth without colon", map[string][]byte{v1.DockerConfigJsonKey: []byte(`{"auths":{"r.io":{"auth":"` + base64.StdEncoding.EncodeToString([]byte("nocolon")) + `"}}}`)}, "", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := parseDockerConfig(&v1.Secret{Data: tt.data})
			var k keyring
			if err == nil {
				err = k.add(cfg, nil)
			}
			if tt.wantErr {
				if err == nil {
					t.Fatal("want an error")
				}
				if len(k.index) != 0 {
					t.Errorf("a malformed config left keys %v", k.index)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := k.lookup("r.io/app")
			if len(got) != 1 || got[0].Username != tt.wantUser || got[0].Password != tt.wantPass || got[0].ServerAddress != "" {
				t.Fatalf("lookup = %v, want %s/%s without a server address", got, tt.wantUser, tt.wantPass)
			}
		})
	}
}

type fakeSecrets struct{ secrets map[string]*v1.Secret }

func (f fakeSecrets) ConfigMap(context.Context, string, string) (*v1.ConfigMap, error) {
	return nil, errors.New("unused")
}

func (f fakeSecrets) Secret(_ context.Context, ns, name string) (*v1.Secret, error) {
	if s, ok := f.secrets[ns+"/"+name]; ok {
		return s, nil
	}
	return nil, apierrors.NewNotFound(v1.Resource("secrets"), name)
}

func (f fakeSecrets) Services(context.Context, string) ([]*v1.Service, error) { return nil, nil }

// fakeImages records the auth of each pull and accepts only the listed users
// ("anonymous" stands for a pull without auth).
type fakeImages struct {
	accept map[string]bool
	pulls  []string
}

func (f *fakeImages) ImageStatus(context.Context, *runtimeapi.ImageSpec, bool) (*runtimeapi.ImageStatusResponse, error) {
	return &runtimeapi.ImageStatusResponse{}, nil
}

func (f *fakeImages) PullImage(_ context.Context, img *runtimeapi.ImageSpec, auth *runtimeapi.AuthConfig, _ *runtimeapi.PodSandboxConfig) (string, error) {
	user := auth.GetUsername()
	if auth == nil {
		user = "anonymous"
	}
	f.pulls = append(f.pulls, user)
	if f.accept[user] {
		return "sha256:1", nil
	}
	return "", fmt.Errorf("pulling %s as %q: 401 Unauthorized", img.GetImage(), user)
}

func dockerSecret(ns, name string, cfg string) *v1.Secret {
	return &v1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Type:       v1.SecretTypeDockerConfigJson,
		Data:       map[string][]byte{v1.DockerConfigJsonKey: []byte(cfg)},
	}
}

func TestEnsureImagePassesPullSecrets(t *testing.T) {
	secrets := fakeSecrets{secrets: map[string]*v1.Secret{
		"ns/reg":   dockerSecret("ns", "reg", `{"auths":{"http://127.0.0.1:5000":{"username":"good","password":"p"}}}`),
		"ns/bad":   dockerSecret("ns", "bad", `{"auths":{"127.0.0.1:5000/busybox":{"username":"bad","password":"p"}}}`),
		"ns/other": dockerSecret("ns", "other", `{"auths":{"reg.example.com":{"username":"other","password":"p"}}}`),
		"ns/junk":  dockerSecret("ns", "junk", `not json`),
	}}
	tests := []struct {
		name        string
		secrets     []string
		accept      []string
		wantPulls   []string
		wantWaiting string
		wantEvents  []string // substrings, in order
	}{
		{"no secrets: anonymous", nil, []string{"anonymous"}, []string{"anonymous"}, "", []string{"Pulling", "Successfully pulled image"}},
		{"matching secret", []string{"reg"}, []string{"good"}, []string{"good"}, "", []string{"Pulling", "Successfully pulled"}},
		{"non-matching secret: anonymous", []string{"other"}, []string{"anonymous"}, []string{"anonymous"}, "", nil},
		{"most specific first, then the next", []string{"reg", "bad"}, []string{"good"}, []string{"bad", "good"}, "", nil},
		{"all credentials fail: no anonymous retry", []string{"reg"}, []string{"anonymous"}, []string{"good"}, "ErrImagePull", []string{"Pulling", "Failed to pull image"}},
		{"missing secret: event, then anonymous", []string{"gone"}, []string{"anonymous"}, []string{"anonymous"}, "", []string{"FailedToRetrieveImagePullSecret", "Pulling"}},
		{"malformed secret skipped", []string{"junk", "reg"}, []string{"good"}, []string{"good"}, "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			img := &fakeImages{accept: map[string]bool{}}
			for _, u := range tt.accept {
				img.accept[u] = true
			}
			rec := record.NewFakeRecorder(100)
			m := New(Config{}, Deps{Images: img, Env: secrets, Node: func() NodeFacts { return NodeFacts{} }, Recorder: rec, Clock: clocktesting.NewFakeClock(time.Unix(0, 0))})
			pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "u1"}}
			for _, s := range tt.secrets {
				pod.Spec.ImagePullSecrets = append(pod.Spec.ImagePullSecrets, v1.LocalObjectReference{Name: s})
			}
			c := &v1.Container{Name: "c", Image: "127.0.0.1:5000/busybox:e2e", ImagePullPolicy: v1.PullAlways}
			_, w, _ := m.ensureImage(context.Background(), pod, c, nil)
			if !slices.Equal(img.pulls, tt.wantPulls) {
				t.Errorf("pulls = %v, want %v", img.pulls, tt.wantPulls)
			}
			gotReason := ""
			if w != nil {
				gotReason = w.Reason
			}
			if gotReason != tt.wantWaiting {
				t.Errorf("waiting = %q, want %q", gotReason, tt.wantWaiting)
			}
			events := strings.Join(drain(rec), "\n")
			pos := 0
			for _, want := range tt.wantEvents {
				i := strings.Index(events[pos:], want)
				if i < 0 {
					t.Fatalf("event %q missing (in order) from:\n%s", want, events)
				}
				pos += i + len(want)
			}
		})
	}
}

// Keyring entries from a pull secret carry its coordinates and a hash that
// equals upstream's (SHA-256 of {"username","password"[,"email"]}), so records
// written by either agent match; entries without a secret record as node-wide.
func TestTrackedCredentials(t *testing.T) {
	src := &kubeletconfigv1beta1.ImagePullSecret{Namespace: "ns", Name: "reg", UID: "uid-1"}
	var k keyring
	if err := k.add(map[string]dockerConfigEntry{
		"reg.example.com":  {Auth: base64.StdEncoding.EncodeToString([]byte("u:p"))},
		"mail.example.com": {Username: "u", Password: "p", Email: "e@x"},
	}, src); err != nil {
		t.Fatal(err)
	}
	hash := func(s string) string {
		sum := sha256.Sum256([]byte(s))
		return hex.EncodeToString(sum[:])
	}
	for repo, want := range map[string]string{
		"reg.example.com/app":  hash(`{"username":"u","password":"p"}`),
		"mail.example.com/app": hash(`{"username":"u","password":"p","email":"e@x"}`),
	} {
		got := podSecrets(k.lookup(repo))
		if len(got) != 1 || got[0] != (kubeletconfigv1beta1.ImagePullSecret{Namespace: "ns", Name: "reg", UID: "uid-1", CredentialHash: want}) {
			t.Errorf("%s: pod secrets %+v, want ns/reg/uid-1 with hash %s", repo, got, want)
		}
	}
	if src.CredentialHash != "" {
		t.Error("add modified its source")
	}
	creds := k.lookup("reg.example.com/app")
	if got := pulledWith(&creds[0]); len(got.KubernetesSecrets) != 1 || got.NodePodsAccessible {
		t.Errorf("pulled with a pod secret: %+v", got)
	}
	if got := pulledWith(nil); !got.NodePodsAccessible || len(got.KubernetesSecrets) != 0 {
		t.Errorf("pulled anonymously: %+v", got)
	}
}
