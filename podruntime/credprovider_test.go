package podruntime

import (
	"context"
	"slices"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/credentialprovider"
	"github.com/nodelet/nodelet/pullrecords"
)

// fakeProviders answers every image with creds and records what it was asked.
type fakeProviders struct {
	creds []credentialprovider.Credential
	asked []string
}

func (f *fakeProviders) Provide(_ context.Context, image string) []credentialprovider.Credential {
	f.asked = append(f.asked, image)
	return f.creds
}

// recordedPulls is a PullRecords that keeps what RecordImagePulled was told.
type recordedPulls struct {
	pulled []*kubeletconfigv1beta1.ImagePullCredentials
}

func (r *recordedPulls) Verify(context.Context, v1.PullPolicy, string, string, func() []kubeletconfigv1beta1.ImagePullSecret) pullrecords.Decision {
	return pullrecords.Decision{Action: pullrecords.Pull}
}
func (r *recordedPulls) RecordPullIntent(context.Context, string) error { return nil }
func (r *recordedPulls) RecordImagePulled(_ context.Context, _, _ string, creds *kubeletconfigv1beta1.ImagePullCredentials) {
	r.pulled = append(r.pulled, creds)
}
func (r *recordedPulls) RecordImagePullFailed(context.Context, string) {}

// Credential provider plugins are asked with the image's repository at pull
// time, their credentials tried after the pod's pull secrets (upstream's union
// keyring), only where their pattern covers the image; an image pulled with
// them is recorded as accessible to every pod on the node.
func TestPullWithCredentialProviders(t *testing.T) {
	secrets := fakeSecrets{secrets: map[string]*v1.Secret{
		"ns/reg": dockerSecret("ns", "reg", `{"auths":{"127.0.0.1:5000":{"username":"from-secret","password":"p"}}}`),
	}}
	cred := func(pattern, user string) credentialprovider.Credential {
		return credentialprovider.Credential{Pattern: pattern, Username: user, Password: "p"}
	}
	for _, tc := range []struct {
		name      string
		secret    bool
		provided  []credentialprovider.Credential
		accept    []string
		wantPulls []string
		wantNode  bool // recorded as nodePodsAccessible
	}{
		{"provider only", false, []credentialprovider.Credential{cred("127.0.0.1:5000", "from-provider")}, []string{"from-provider"}, []string{"from-provider"}, true},
		{"secret first, then provider", true, []credentialprovider.Credential{cred("127.0.0.1:5000", "from-provider")}, []string{"from-provider"}, []string{"from-secret", "from-provider"}, true},
		{"secret succeeds: provider's not tried", true, []credentialprovider.Credential{cred("127.0.0.1:5000", "from-provider")}, []string{"from-secret"}, []string{"from-secret"}, false},
		{"pattern of another registry: anonymous", false, []credentialprovider.Credential{cred("reg.example.com", "elsewhere")}, []string{"anonymous"}, []string{"anonymous"}, true},
		{"more specific pattern first", false, []credentialprovider.Credential{cred("127.0.0.1:5000", "general"), cred("127.0.0.1:5000/busybox", "specific")},
			[]string{"general"}, []string{"specific", "general"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			img := &fakeImages{accept: map[string]bool{}}
			for _, u := range tc.accept {
				img.accept[u] = true
			}
			prov := &fakeProviders{creds: tc.provided}
			records := &recordedPulls{}
			m := New(Config{}, Deps{Images: img, Env: secrets, Node: func() NodeFacts { return NodeFacts{} }, Recorder: record.NewFakeRecorder(100), Clock: clocktesting.NewFakeClock(time.Unix(0, 0)), CredentialProviders: prov, PullRecords: records})
			pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "u1"}}
			if tc.secret {
				pod.Spec.ImagePullSecrets = []v1.LocalObjectReference{{Name: "reg"}}
			}
			c := &v1.Container{Name: "c", Image: "127.0.0.1:5000/busybox:e2e", ImagePullPolicy: v1.PullAlways}
			if _, w, err := m.ensureImage(context.Background(), pod, c, nil); w != nil || err != nil {
				t.Fatalf("ensureImage: waiting %+v, err %v", w, err)
			}
			if !slices.Equal(img.pulls, tc.wantPulls) {
				t.Errorf("pulls as %v, want %v", img.pulls, tc.wantPulls)
			}
			if !slices.Equal(prov.asked, []string{"127.0.0.1:5000/busybox"}) {
				t.Errorf("providers asked for %v, want the repository once", prov.asked)
			}
			if len(records.pulled) != 1 || records.pulled[0].NodePodsAccessible != tc.wantNode {
				t.Errorf("pull recorded %+v, want nodePodsAccessible %v", records.pulled, tc.wantNode)
			}
		})
	}
}
