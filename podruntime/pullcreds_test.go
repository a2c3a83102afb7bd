package podruntime

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/cri"
	"github.com/nodelet/nodelet/internal/testsupport/fakecri"
	"github.com/nodelet/nodelet/pleg"
	"github.com/nodelet/nodelet/pullrecords"
	"github.com/nodelet/nodelet/volumes"
)

type noVolumes struct{}

func (noVolumes) SetUpPod(context.Context, *v1.Pod) (map[string]volumes.HostVolume, error) {
	return map[string]volumes.HostVolume{}, nil
}

// PrepareSubPath is never reached: these pods mount no volumes.
func (noVolumes) PrepareSubPath(context.Context, *v1.Pod, volumes.HostVolume, volumes.SubPath) (string, error) {
	return "", errors.New("noVolumes has no volumes")
}

func (noVolumes) TearDownSubPaths(context.Context, types.UID) error { return nil }

const privateImage = "reg.example.com/team/app:1.0"

// privateRegistryRig is the fake CRI with a private repository (only
// alice:s3cret may pull it) and pull secrets in three namespaces.
type privateRegistryRig struct {
	t       *testing.T
	fake    *fakecri.Runtime
	client  *cri.Client
	root    string
	secrets fakeSecrets
	rec     *record.FakeRecorder
	pods    int
}

func newPrivateRegistryRig(t *testing.T) *privateRegistryRig {
	ctx := context.Background()
	fake := fakecri.New(t)
	fake.RequireAuth("reg.example.com/team/app", "alice", "s3cret")
	client, err := cri.New(ctx, fake.Endpoint(), "", 10*time.Second)
	if err != nil {
		t.Fatalf("connecting to the fake runtime: %v", err)
	}
	t.Cleanup(func() { _ = client.Close(context.Background()) })
	good := `{"auths":{"reg.example.com":{"username":"alice","password":"s3cret"}}}`
	secret := func(ns, name, uid, cfg string) *v1.Secret {
		s := dockerSecret(ns, name, cfg)
		s.UID = types.UID(uid)
		return s
	}
	return &privateRegistryRig{
		t: t, fake: fake, client: client, root: t.TempDir(), rec: record.NewFakeRecorder(1000),
		secrets: fakeSecrets{secrets: map[string]*v1.Secret{
			"tenant-a/pull":  secret("tenant-a", "pull", "uid-a", good),
			"tenant-a/wrong": secret("tenant-a", "wrong", "uid-w", `{"auths":{"reg.example.com":{"username":"alice","password":"guess"}}}`),
			"tenant-d/copy":  secret("tenant-d", "copy", "uid-d", good),
		}},
	}
}

// manager is a fresh podruntime.Manager (a nodelet start) over the rig's root dir.
func (r *privateRegistryRig) manager(policy kubeletconfigv1beta1.ImagePullCredentialsVerificationPolicy, allowlist ...string) *Manager {
	r.t.Helper()
	p, err := pullrecords.NewPolicy(policy, allowlist)
	if err != nil {
		r.t.Fatal(err)
	}
	recs, err := pullrecords.Open(context.Background(), r.root, p, r.client, clock.RealClock{})
	if err != nil {
		r.t.Fatal(err)
	}
	cfg := Config{RootDir: r.root, PodLogsDir: filepath.Join(r.root, "logs")}
	return New(cfg, Deps{Runtime: r.client, Images: r.client, Volumes: noVolumes{}, Env: r.secrets, Node: func() NodeFacts { return NodeFacts{Name: "node1"} }, Recorder: r.rec, Clock: clock.RealClock{}, PullRecords: recs})
}

type syncOutcome struct {
	waiting v1.ContainerStateWaiting
	pulled  bool // PullImage was called
	running bool
}

// run syncs a new pod in ns using the private image, with secret ("" for
// none) as its only pull secret.
func (r *privateRegistryRig) run(m *Manager, ns, secret string, pp v1.PullPolicy) syncOutcome {
	r.t.Helper()
	r.pods++
	uid := types.UID(strings.Repeat("0", 7) + string(rune('a'+r.pods)))
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "p" + string(uid), UID: uid},
		Spec:       v1.PodSpec{Containers: []v1.Container{{Name: "app", Image: privateImage, ImagePullPolicy: pp}}},
	}
	if secret != "" {
		pod.Spec.ImagePullSecrets = []v1.LocalObjectReference{{Name: secret}}
	}
	r.fake.ResetCalls()
	res, _ := m.SyncPod(context.Background(), pod, &pleg.PodStatus{})
	var out syncOutcome
	if w, ok := res.Waiting["app"]; ok {
		out.waiting = v1.ContainerStateWaiting{Reason: w.Reason, Message: w.Message}
	}
	out.pulled = slices.Contains(r.fake.Calls(), "PullImage")
	ctrs, err := r.client.ListContainers(context.Background(), &runtimeapi.ContainerFilter{LabelSelector: map[string]string{cri.LabelPodUID: string(uid)}})
	if err != nil {
		r.t.Fatal(err)
	}
	for _, c := range ctrs {
		out.running = out.running || c.State == runtimeapi.ContainerState_CONTAINER_RUNNING
	}
	return out
}

// A pod without the right pull secret must not run a private image another pod
// pulled, whatever its pull policy; a pod with the same credentials runs it
// without a pull; and this holds across a nodelet restart.
func TestPresentPrivateImageNeedsThePodsCredentials(t *testing.T) {
	r := newPrivateRegistryRig(t)
	m := r.manager("") // the default, NeverVerifyPreloadedImages
	neverMsg := `Container image "` + privateImage + `" is not present with pull policy of Never`
	steps := []struct {
		name        string
		restart     bool
		ns, secret  string
		pullPolicy  v1.PullPolicy
		wantReason  string
		wantMessage string
		wantPull    bool
		wantRunning bool
	}{
		{name: "A pulls the private image with its secret", ns: "tenant-a", secret: "pull", pullPolicy: v1.PullIfNotPresent, wantPull: true, wantRunning: true},
		{name: "B without a secret re-pulls anonymously and is refused", ns: "tenant-b", pullPolicy: v1.PullIfNotPresent, wantReason: "ErrImagePull", wantPull: true},
		{name: "B without a secret, Never: refused as if absent", ns: "tenant-b", pullPolicy: v1.PullNever, wantReason: "ErrImageNeverPull", wantMessage: neverMsg},
		{name: "B with a wrong password re-pulls and is refused", ns: "tenant-a", secret: "wrong", pullPolicy: v1.PullIfNotPresent, wantReason: "ErrImagePull", wantPull: true},
		{name: "C with the same secret runs without a pull", ns: "tenant-a", secret: "pull", pullPolicy: v1.PullIfNotPresent, wantRunning: true},
		{name: "C with the same secret, Never: runs", ns: "tenant-a", secret: "pull", pullPolicy: v1.PullNever, wantRunning: true},
		{name: "D with a copy of the secret elsewhere runs without a pull", ns: "tenant-d", secret: "copy", pullPolicy: v1.PullNever, wantRunning: true},
		{name: "restarted: C still runs without a pull", restart: true, ns: "tenant-a", secret: "pull", pullPolicy: v1.PullIfNotPresent, wantRunning: true},
		{name: "restarted: D's learned copy still runs, Never", ns: "tenant-d", secret: "copy", pullPolicy: v1.PullNever, wantRunning: true},
		{name: "restarted: B is still refused, Never", ns: "tenant-b", pullPolicy: v1.PullNever, wantReason: "ErrImageNeverPull", wantMessage: neverMsg},
		{name: "restarted: B is still refused, IfNotPresent", ns: "tenant-b", pullPolicy: v1.PullIfNotPresent, wantReason: "ErrImagePull", wantPull: true},
	}
	for _, s := range steps {
		if s.restart {
			m = r.manager("")
		}
		got := r.run(m, s.ns, s.secret, s.pullPolicy)
		if got.waiting.Reason != s.wantReason || (s.wantMessage != "" && got.waiting.Message != s.wantMessage) {
			t.Errorf("%s: waiting = %q %q, want %q %q", s.name, got.waiting.Reason, got.waiting.Message, s.wantReason, s.wantMessage)
		}
		if got.pulled != s.wantPull {
			t.Errorf("%s: pulled = %t, want %t", s.name, got.pulled, s.wantPull)
		}
		if got.running != s.wantRunning {
			t.Errorf("%s: running = %t, want %t", s.name, got.running, s.wantRunning)
		}
	}
	events := strings.Join(drain(r.rec), "\n")
	if !strings.Contains(events, `Container image "`+privateImage+`" already present on machine and can be accessed by the pod`) {
		t.Errorf("no verified-present event among:\n%s", events)
	}
}

// Each policy decides about an image that is on the node without a record
// (preloaded) and about one nodelet pulled with a secret, for a pod without one.
func TestVerificationPolicies(t *testing.T) {
	for _, tc := range []struct {
		name                     string
		policy                   kubeletconfigv1beta1.ImagePullCredentialsVerificationPolicy
		allowlist                []string
		wantPreloaded, wantOther string // waiting reason under Never; "" runs
	}{
		{"NeverVerify", kubeletconfigv1beta1.NeverVerify, nil, "", ""},
		{"NeverVerifyPreloadedImages", kubeletconfigv1beta1.NeverVerifyPreloadedImages, nil, "", "ErrImageNeverPull"},
		{"NeverVerifyAllowlistedImages, listed", kubeletconfigv1beta1.NeverVerifyAllowlistedImages, []string{"reg.example.com/team/preloaded"}, "", "ErrImageNeverPull"},
		{"NeverVerifyAllowlistedImages, not listed", kubeletconfigv1beta1.NeverVerifyAllowlistedImages, []string{"reg.example.com/other/*"}, "ErrImageNeverPull", "ErrImageNeverPull"},
		{"AlwaysVerify", kubeletconfigv1beta1.AlwaysVerify, nil, "ErrImageNeverPull", "ErrImageNeverPull"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newPrivateRegistryRig(t)
			r.fake.AddImage("reg.example.com/team/preloaded:1") // there before nodelet, no record
			m := r.manager(tc.policy, tc.allowlist...)
			if got := r.run(m, "tenant-a", "pull", v1.PullIfNotPresent); !got.running {
				t.Fatalf("A could not pull: %+v", got)
			}
			pod := func(image string) string {
				r.pods++
				uid := types.UID("policy-" + string(rune('a'+r.pods)))
				p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant-b", Name: string(uid), UID: uid},
					Spec: v1.PodSpec{Containers: []v1.Container{{Name: "app", Image: image, ImagePullPolicy: v1.PullNever}}}}
				res, _ := m.SyncPod(context.Background(), p, &pleg.PodStatus{})
				return res.Waiting["app"].Reason
			}
			if got := pod("reg.example.com/team/preloaded:1"); got != tc.wantPreloaded {
				t.Errorf("preloaded image: waiting %q, want %q", got, tc.wantPreloaded)
			}
			if got := pod(privateImage); got != tc.wantOther {
				t.Errorf("image pulled with A's secret: waiting %q, want %q", got, tc.wantOther)
			}
		})
	}
}
