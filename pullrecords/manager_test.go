package pullrecords

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/atomicfile"
)

// fakeImages answers ImageStatus from a map of image → ID.
type fakeImages map[string]string

func (f fakeImages) ImageStatus(_ context.Context, spec *runtimeapi.ImageSpec, _ bool) (*runtimeapi.ImageStatusResponse, error) {
	if id, ok := f[spec.GetImage()]; ok {
		return &runtimeapi.ImageStatusResponse{Image: &runtimeapi.Image{Id: id}}, nil
	}
	return &runtimeapi.ImageStatusResponse{}, nil
}

func open(t *testing.T, root string, mode kubeletconfigv1beta1.ImagePullCredentialsVerificationPolicy, images fakeImages) *Manager {
	t.Helper()
	m, err := Open(context.Background(), root, mustPolicy(t, mode), images, clocktesting.NewFakePassiveClock(time.Unix(1700000000, 0)))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return m
}

func hashed(key string) string {
	sum := sha256.Sum256([]byte(key))
	return "sha256-" + hex.EncodeToString(sum[:])
}

func verify(t *testing.T, m *Manager, pp v1.PullPolicy, secrets ...kubeletconfigv1beta1.ImagePullSecret) Action {
	t.Helper()
	return m.Verify(context.Background(), pp, appImage, appRef, func() []kubeletconfigv1beta1.ImagePullSecret { return secrets }).Action
}

func pulledWith(t *testing.T, m *Manager, creds *kubeletconfigv1beta1.ImagePullCredentials) {
	t.Helper()
	ctx := context.Background()
	if err := m.RecordPullIntent(ctx, appImage); err != nil {
		t.Fatal(err)
	}
	m.RecordImagePulled(ctx, appImage, appRef, creds)
}

// The records survive a restart: a new Manager over the same root dir decides
// the same way, and what a check learned is kept too.
func TestRecordsSurviveRestart(t *testing.T) {
	root := t.TempDir()
	m := open(t, root, kubeletconfigv1beta1.NeverVerifyPreloadedImages, nil)
	pulledWith(t, m, &kubeletconfigv1beta1.ImagePullCredentials{KubernetesSecrets: []kubeletconfigv1beta1.ImagePullSecret{secretA}})
	if got := verify(t, m, v1.PullIfNotPresent, secretACopy); got != UsePresent {
		t.Fatalf("same credentials in another secret: %s", got)
	}

	m2 := open(t, root, kubeletconfigv1beta1.NeverVerifyPreloadedImages, nil)
	for _, tc := range []struct {
		name    string
		pp      v1.PullPolicy
		secrets []kubeletconfigv1beta1.ImagePullSecret
		want    Action
	}{
		{"the pulling secret", v1.PullIfNotPresent, []kubeletconfigv1beta1.ImagePullSecret{secretA}, UsePresent},
		{"the learned copy", v1.PullNever, []kubeletconfigv1beta1.ImagePullSecret{secretACopy}, UsePresent},
		{"no secret", v1.PullIfNotPresent, nil, Pull},
		{"no secret, Never", v1.PullNever, nil, RefuseNeverPull},
		{"another tenant", v1.PullIfNotPresent, []kubeletconfigv1beta1.ImagePullSecret{secretB}, Pull},
	} {
		if got := verify(t, m2, tc.pp, tc.secrets...); got != tc.want {
			t.Errorf("after restart, %s: %s, want %s", tc.name, got, tc.want)
		}
	}
	if _, err := os.Stat(filepath.Join(root, "image_manager", "pulling", hashed(appImage))); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the pull intent outlived a finished pull: %v", err)
	}
}

// A pull that a crash interrupted must not make the image look preloaded.
func TestInterruptedPull(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	m := open(t, root, kubeletconfigv1beta1.NeverVerifyPreloadedImages, nil)
	if err := m.RecordPullIntent(ctx, appImage); err != nil {
		t.Fatal(err)
	}
	other := "reg.example.com/team/other:2"
	if err := m.RecordPullIntent(ctx, other); err != nil {
		t.Fatal(err)
	}
	// nodelet dies mid-pull; at the restart app arrived, other did not.
	m2 := open(t, root, kubeletconfigv1beta1.NeverVerifyPreloadedImages, fakeImages{appImage: appRef})
	if got := verify(t, m2, v1.PullIfNotPresent, secretA); got != Pull {
		t.Errorf("image of an interrupted pull: %s, want Pull", got)
	}
	if _, err := os.Stat(filepath.Join(root, "image_manager", "pulled", hashed(appRef))); err != nil {
		t.Errorf("the interrupted pull did not become a record: %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, "image_manager", "pulling", hashed(appImage))); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the intent of an arrived image stayed: %v", err)
	}
	// other's intent stays: should the image show up later, it is not preloaded.
	if got := m2.Verify(ctx, v1.PullIfNotPresent, other, "sha256:other", nil).Action; got != Pull {
		t.Errorf("image with a pending intent: %s, want Pull", got)
	}
	if got := m2.Verify(ctx, v1.PullIfNotPresent, "reg.example.com/team/preloaded:1", "sha256:pre", nil).Action; got != UsePresent {
		t.Errorf("preloaded image: %s, want UsePresent", got)
	}
}

func TestIntentsAreCounted(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	m := open(t, root, kubeletconfigv1beta1.NeverVerifyPreloadedImages, nil)
	intent := filepath.Join(root, "image_manager", "pulling", hashed(appImage))
	for range 2 {
		if err := m.RecordPullIntent(ctx, appImage); err != nil {
			t.Fatal(err)
		}
	}
	m.RecordImagePullFailed(ctx, appImage)
	if _, err := os.Stat(intent); err != nil {
		t.Fatalf("intent gone while a pull is still in flight: %v", err)
	}
	if got := verify(t, m, v1.PullIfNotPresent); got != Pull {
		t.Errorf("image being pulled: %s, want Pull", got)
	}
	m.RecordImagePullFailed(ctx, appImage)
	if _, err := os.Stat(intent); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("intent stayed after the last pull ended: %v", err)
	}
}

func TestOnDiskLayout(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	m := open(t, root, kubeletconfigv1beta1.NeverVerifyPreloadedImages, nil)
	// A reference full of path syntax must still only ever name hashed files.
	weird := "reg.example.com/../../etc/passwd:1"
	if err := m.RecordPullIntent(ctx, weird); err != nil {
		t.Fatal(err)
	}
	pulledWith(t, m, &kubeletconfigv1beta1.ImagePullCredentials{KubernetesSecrets: []kubeletconfigv1beta1.ImagePullSecret{secretA}})

	for _, d := range []string{"image_manager", "image_manager/pulling", "image_manager/pulled"} {
		fi, err := os.Stat(filepath.Join(root, d))
		if err != nil || fi.Mode().Perm() != 0o700 || !fi.IsDir() {
			t.Errorf("%s: %v, %v; want a 0700 directory", d, fi.Mode(), err)
		}
	}
	want := map[string]string{
		"image_manager/pulling/" + hashed(weird): "ImagePullIntent",
		"image_manager/pulled/" + hashed(appRef): "ImagePulledRecord",
	}
	var found []string
	_ = filepath.WalkDir(filepath.Join(root, "image_manager"), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(root, p)
			found = append(found, rel)
		}
		return nil
	})
	if len(found) != len(want) {
		t.Errorf("files = %v, want %v", found, want)
	}
	for rel, kind := range want {
		p := filepath.Join(root, rel)
		fi, err := os.Stat(p)
		if err != nil {
			t.Errorf("%s: %v", rel, err)
			continue
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s mode = %v, want 0600", rel, fi.Mode())
		}
		data, _ := os.ReadFile(p)
		var meta struct{ APIVersion, Kind string }
		if err := json.Unmarshal(data, &meta); err != nil || meta.APIVersion != "kubelet.config.k8s.io/v1beta1" || meta.Kind != kind {
			t.Errorf("%s = %s (%v), want a kubelet.config.k8s.io/v1beta1 %s", rel, data, err, kind)
		}
	}
	data, _ := os.ReadFile(filepath.Join(root, "image_manager/pulled", hashed(appRef)))
	var rec kubeletconfigv1beta1.ImagePulledRecord
	if err := json.Unmarshal(data, &rec); err != nil {
		t.Fatal(err)
	}
	wantMapping := map[string]kubeletconfigv1beta1.ImagePullCredentials{appName: {KubernetesSecrets: []kubeletconfigv1beta1.ImagePullSecret{secretA}}}
	if rec.ImageRef != appRef || !reflect.DeepEqual(rec.CredentialMapping, wantMapping) || rec.LastUpdatedTime.IsZero() {
		t.Errorf("record = %+v", rec)
	}
}

// An upstream kubelet's v1alpha1 files are read and rewritten as v1beta1.
func TestMigratesV1alpha1(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "image_manager", "pulled")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	old := `{"apiVersion":"kubelet.config.k8s.io/v1alpha1","kind":"ImagePulledRecord","lastUpdatedTime":"2025-01-01T00:00:00Z",` +
		`"imageRef":"` + appRef + `","credentialMapping":{"` + appName + `":{"kubernetesSecrets":[{"uid":"uid-a","namespace":"tenant-a","name":"pull","credentialHash":"hash-a"}]}}}`
	path := filepath.Join(dir, hashed(appRef))
	if err := os.WriteFile(path, []byte(old), 0o600); err != nil {
		t.Fatal(err)
	}
	m := open(t, root, kubeletconfigv1beta1.NeverVerifyPreloadedImages, nil)
	data, _ := os.ReadFile(path)
	if !strings.Contains(string(data), `"apiVersion":"kubelet.config.k8s.io/v1beta1"`) {
		t.Errorf("record not migrated: %s", data)
	}
	if got := verify(t, m, v1.PullIfNotPresent, secretA); got != UsePresent {
		t.Errorf("migrated record, same secret: %s", got)
	}
	if got := verify(t, m, v1.PullIfNotPresent); got != Pull {
		t.Errorf("migrated record, no secret: %s", got)
	}
}

// Bad record files are logged and count as "no usable record": the image must be
// verified (never used on their word), nothing crashes, and the next successful
// pull replaces them.
func TestUnreadableRecords(t *testing.T) {
	valid := `{"apiVersion":"kubelet.config.k8s.io/v1beta1","kind":"ImagePulledRecord","lastUpdatedTime":"2025-01-01T00:00:00Z",` +
		`"imageRef":"` + appRef + `","credentialMapping":{"` + appName + `":{"nodePodsAccessible":true}}}`
	tests := []struct {
		name  string
		plant func(t *testing.T, path string)
	}{
		{"zero-length", content("")},
		{"partial write", content(valid[:len(valid)/2])},
		{"not JSON", content("\x00\x01\x02garbage")},
		{"JSON null", content("null")},
		{"no kind", content(`{"imageRef":"` + appRef + `"}`)},
		{"unknown field", content(strings.Replace(valid, `"imageRef"`, `"bogus":1,"imageRef"`, 1))},
		{"duplicate field", content(strings.Replace(valid, `"imageRef"`, `"imageRef":"x","imageRef"`, 1))},
		{"wrong kind", content(`{"apiVersion":"kubelet.config.k8s.io/v1beta1","kind":"ImagePullIntent","image":"x"}`)},
		{"KubeletConfiguration", content(`{"apiVersion":"kubelet.config.k8s.io/v1beta1","kind":"KubeletConfiguration"}`)},
		{"unknown version", content(strings.Replace(valid, "v1beta1", "v9", 1))},
		{"another image's record", content(strings.Replace(valid, appRef, "sha256:other", 1))},
		{"too large", content(`{"apiVersion":"kubelet.config.k8s.io/v1beta1","kind":"ImagePulledRecord","imageRef":"` + strings.Repeat("a", maxRecordSize) + `"}`)},
		{"symlink", func(t *testing.T, path string) {
			target := filepath.Join(t.TempDir(), "elsewhere")
			if err := os.WriteFile(target, []byte(valid), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(target, path); err != nil {
				t.Fatal(err)
			}
		}},
		{"fifo", func(t *testing.T, path string) {
			if err := syscall.Mkfifo(path, 0o600); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			dir := filepath.Join(root, "image_manager", "pulled")
			if err := os.MkdirAll(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			tt.plant(t, filepath.Join(dir, hashed(appRef)))
			// The same junk as a pull intent must not stop Open either.
			pulling := filepath.Join(root, "image_manager", "pulling")
			if err := os.MkdirAll(pulling, 0o700); err != nil {
				t.Fatal(err)
			}
			tt.plant(t, filepath.Join(pulling, hashed(appImage)))

			m := open(t, root, kubeletconfigv1beta1.NeverVerify, fakeImages{appImage: appRef})
			if got := verify(t, m, v1.PullIfNotPresent); got != Pull {
				t.Errorf("unreadable record: %s, want Pull", got)
			}
			if got := verify(t, m, v1.PullNever); got != RefuseNeverPull {
				t.Errorf("unreadable record, Never: %s, want RefuseNeverPull", got)
			}
			m.RecordImagePulled(context.Background(), appImage, appRef, &kubeletconfigv1beta1.ImagePullCredentials{NodePodsAccessible: true})
			if got := verify(t, m, v1.PullNever); got != UsePresent {
				t.Errorf("after a successful pull: %s, want UsePresent", got)
			}
			if got := verify(t, open(t, root, kubeletconfigv1beta1.AlwaysVerify, nil), v1.PullNever); got != UsePresent {
				t.Errorf("after a successful pull and a restart: %s, want UsePresent", got)
			}
		})
	}
}

func content(s string) func(t *testing.T, path string) {
	return func(t *testing.T, path string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// Temp files of an interrupted write are removed at Open, and never read.
func TestLeftoverTempFiles(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "image_manager", "pulled")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(dir, "."+hashed(appRef)+".tmp-123") // as atomicfile.WriteFile names them
	if err := os.WriteFile(tmp, []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	m := open(t, root, kubeletconfigv1beta1.NeverVerifyPreloadedImages, nil)
	if _, err := os.Stat(tmp); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("leftover temp file kept: %v", err)
	}
	if got := verify(t, m, v1.PullIfNotPresent); got != UsePresent {
		t.Errorf("preloaded image next to a leftover temp file: %s, want UsePresent", got)
	}
}

// appByDigest names appImage's image by digest, as a second pod may.
const appByDigest = "reg.example.com/team/app@sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"

// TestDigestBeforeRecordLands: a pull of appImage by tag has finished at the
// runtime but its record has not landed (RecordImagePulled not called yet),
// and a pod without credentials names the same image by digest. Before the
// fix the intent (by name) and the record (by ID) both missed it, and the
// image counted as preloaded: the pod used it without credentials.
func TestDigestBeforeRecordLands(t *testing.T) {
	ctx := context.Background()
	m := open(t, t.TempDir(), kubeletconfigv1beta1.NeverVerifyPreloadedImages, fakeImages{appImage: appRef})
	if err := m.RecordPullIntent(ctx, appImage); err != nil {
		t.Fatal(err)
	}
	for pp, want := range map[v1.PullPolicy]Action{v1.PullIfNotPresent: Pull, v1.PullNever: RefuseNeverPull} {
		if got := m.Verify(ctx, pp, appByDigest, appRef, nil).Action; got != want {
			t.Errorf("%s, by digest before the record: %s, want %s", pp, got, want)
		}
	}
	// A preloaded image with another ID stays preloaded meanwhile.
	if got := m.Verify(ctx, v1.PullIfNotPresent, "reg.example.com/team/preloaded:1", "sha256:pre", nil).Action; got != UsePresent {
		t.Errorf("preloaded image during another pull: %s, want UsePresent", got)
	}
	m.RecordImagePulled(ctx, appImage, appRef, &kubeletconfigv1beta1.ImagePullCredentials{KubernetesSecrets: []kubeletconfigv1beta1.ImagePullSecret{secretA}})
	secrets := func(s ...kubeletconfigv1beta1.ImagePullSecret) func() []kubeletconfigv1beta1.ImagePullSecret {
		return func() []kubeletconfigv1beta1.ImagePullSecret { return s }
	}
	if got := m.Verify(ctx, v1.PullIfNotPresent, appByDigest, appRef, secrets()).Action; got != Pull {
		t.Errorf("by digest, no credentials, after the record: %s, want Pull", got)
	}
	if got := m.Verify(ctx, v1.PullIfNotPresent, appByDigest, appRef, secrets(secretA)).Action; got != UsePresent {
		t.Errorf("by digest, the pulling secret, after the record: %s, want UsePresent", got)
	}
}

// TestFailedRecordWriteIsRetried: the record of a finished pull fails to be
// written once. Before the fix nothing wrote it again and the image, named by
// digest, counted as preloaded until a restart.
func TestFailedRecordWriteIsRetried(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	m := open(t, root, kubeletconfigv1beta1.NeverVerifyPreloadedImages, nil)
	pulledDir := filepath.Join(root, "image_manager", "pulled")
	failures := 0
	m.store.writeFile = func(path string, data []byte, perm os.FileMode) error {
		if filepath.Dir(path) == pulledDir && failures == 0 {
			failures++
			return &os.PathError{Op: "write", Path: path, Err: syscall.ENOSPC}
		}
		return atomicfile.WriteFile(path, data, perm)
	}
	if err := m.RecordPullIntent(ctx, appImage); err != nil {
		t.Fatal(err)
	}
	m.RecordImagePulled(ctx, appImage, appRef, &kubeletconfigv1beta1.ImagePullCredentials{KubernetesSecrets: []kubeletconfigv1beta1.ImagePullSecret{secretA}})
	if failures != 1 {
		t.Fatalf("the record write did not fail once: %d", failures)
	}
	if got := m.Verify(ctx, v1.PullIfNotPresent, appByDigest, appRef, nil).Action; got != Pull {
		t.Errorf("by digest after a failed record write: %s, want Pull", got)
	}
	// That call wrote the record again, and the intent went with it.
	recordPath := filepath.Join(pulledDir, hashed(appRef))
	if _, err := os.Stat(recordPath); err != nil {
		t.Fatalf("the failed record was not written again: %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, "image_manager", "pulling", hashed(appImage))); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the intent outlived the record's write: %v", err)
	}
	m2 := open(t, root, kubeletconfigv1beta1.NeverVerifyPreloadedImages, nil)
	for _, tc := range []struct {
		secrets []kubeletconfigv1beta1.ImagePullSecret
		want    Action
	}{{nil, Pull}, {[]kubeletconfigv1beta1.ImagePullSecret{secretA}, UsePresent}} {
		if got := m2.Verify(ctx, v1.PullIfNotPresent, appByDigest, appRef, func() []kubeletconfigv1beta1.ImagePullSecret { return tc.secrets }).Action; got != tc.want {
			t.Errorf("after a restart, secrets %v: %s, want %s", tc.secrets, got, tc.want)
		}
	}
}

func TestPulledByNodelet(t *testing.T) {
	rec := record(nil)
	for _, tt := range []struct {
		name string
		o    origin
		want bool
	}{
		{"nothing known: preloaded", origin{}, false},
		{"a record", origin{rec: rec}, true},
		{"unreadable records", origin{unreadable: true}, true},
		{"an intent for its name", origin{intent: true}, true},
		{"a pull in flight resolved to its ID", origin{inFlightIDs: []string{"sha256:other", appRef}}, true},
		{"pulls in flight of other images", origin{inFlightIDs: []string{"sha256:other"}}, false},
		{"a pull in flight not asked about", origin{inFlightUnknown: true}, true},
	} {
		if got := pulledByNodelet(tt.o, appRef); got != tt.want {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
	}
}
