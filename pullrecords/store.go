package pullrecords

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/klog/v2"
	kubeletconfigv1alpha1 "k8s.io/kubelet/config/v1alpha1"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"

	"github.com/nodelet/nodelet/internal/atomicfile"
)

// On-disk layout, as the upstream kubelet's: <root>/image_manager/pulling holds
// an ImagePullIntent per image being pulled, <root>/image_manager/pulled an
// ImagePulledRecord per image ID; each file is named "sha256-" + the hex SHA-256
// of the image (intents) or image ID (records), never the raw reference.
const (
	dirName        = "image_manager"
	pullingDirName = "pulling"
	pulledDirName  = "pulled"
	filePrefix     = "sha256-"
	// maxRecordSize bounds what is read from one file; a bigger one is corrupt.
	maxRecordSize = 4 << 20
)

// errUnreadable marks a file that exists but does not decode.
var errUnreadable = errors.New("unreadable pull record")

// store reads and writes intents and records as files; it keeps no state
// besides its paths and codecs, so callers serialize access.
type store struct {
	pullingDir, pulledDir string
	encoder               runtime.Encoder
	decoder               runtime.Decoder
	// writeFile writes a file atomically (atomicfile.WriteFile); tests make
	// it fail to prove a failed write is retried.
	writeFile func(path string, data []byte, perm fs.FileMode) error
}

func newStore(rootDir string) (*store, error) {
	scheme := runtime.NewScheme()
	if err := kubeletconfigv1beta1.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("registering kubelet.config.k8s.io/v1beta1: %w", err)
	}
	if err := kubeletconfigv1alpha1.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("registering kubelet.config.k8s.io/v1alpha1: %w", err)
	}
	// Strict: unknown or duplicate fields make a file unreadable rather than half-read.
	codecs := serializer.NewCodecFactory(scheme, serializer.EnableStrict)
	info, ok := runtime.SerializerInfoForMediaType(codecs.SupportedMediaTypes(), runtime.ContentTypeJSON)
	if !ok {
		return nil, errors.New("no JSON serializer for the kubelet config API")
	}
	base := filepath.Join(rootDir, dirName)
	s := &store{
		pullingDir: filepath.Join(base, pullingDirName),
		pulledDir:  filepath.Join(base, pulledDirName),
		encoder:    codecs.EncoderForVersion(info.Serializer, kubeletconfigv1beta1.SchemeGroupVersion),
		decoder:    codecs.UniversalDeserializer(),
		writeFile:  atomicfile.WriteFile,
	}
	for _, d := range []string{base, s.pullingDir, s.pulledDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("creating %s: %w", d, err)
		}
		// Records name the secrets that may use private images: root only.
		if err := os.Chmod(d, 0o700); err != nil {
			return nil, fmt.Errorf("restricting %s: %w", d, err)
		}
	}
	return s, nil
}

// fileName hashes key, so no image reference ever becomes a path.
func fileName(key string) string {
	sum := sha256.Sum256([]byte(key))
	return filePrefix + hex.EncodeToString(sum[:])
}

func (s *store) writeIntent(image string) error {
	intent := &kubeletconfigv1beta1.ImagePullIntent{Image: image}
	return s.write(s.pullingDir, fileName(image), intent)
}

// intentExists reports whether an intent for image is on disk; errUnreadable
// when a file is there but is not an intent for image.
func (s *store) intentExists(image string) (bool, error) {
	intent, err := readObject(filepath.Join(s.pullingDir, fileName(image)), s.decodeIntent)
	if err != nil || intent == nil {
		return false, err
	}
	if intent.Image != image {
		return false, fmt.Errorf("%w: intent file for %q holds %q", errUnreadable, image, intent.Image)
	}
	return true, nil
}

func (s *store) deleteIntent(image string) error {
	return removeFile(filepath.Join(s.pullingDir, fileName(image)))
}

// record returns imageRef's record, nil when there is none; errUnreadable
// when its file does not decode or belongs to another image ID.
func (s *store) record(imageRef string) (*kubeletconfigv1beta1.ImagePulledRecord, error) {
	rec, err := readObject(filepath.Join(s.pulledDir, fileName(imageRef)), s.decodeRecord)
	if err != nil || rec == nil {
		return nil, err
	}
	if rec.ImageRef != imageRef {
		return nil, fmt.Errorf("%w: record file for %q holds %q", errUnreadable, imageRef, rec.ImageRef)
	}
	return rec, nil
}

// readObject decodes the file at path; nil when there is none.
func readObject[T any](path string, decode func([]byte) (*T, bool, error)) (*T, error) {
	data, err := readFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	obj, _, err := decode(data)
	return obj, err
}

func (s *store) writeRecord(rec *kubeletconfigv1beta1.ImagePulledRecord) error {
	return s.write(s.pulledDir, fileName(rec.ImageRef), rec)
}

// listIntents returns the decodable intents, migrated to the current version.
func (s *store) listIntents() []*kubeletconfigv1beta1.ImagePullIntent {
	return loadDir(s, s.pullingDir, s.decodeIntent, func(i *kubeletconfigv1beta1.ImagePullIntent) string { return i.Image })
}

// migrateRecords rewrites records of older API versions in the current one.
func (s *store) migrateRecords() {
	loadDir(s, s.pulledDir, s.decodeRecord, func(r *kubeletconfigv1beta1.ImagePulledRecord) string { return r.ImageRef })
}

// loadDir decodes every record file of dir, logging and skipping the bad ones
// and rewriting those of older API versions under fileName(key(obj)).
func loadDir[T runtime.Object](s *store, dir string, decode func([]byte) (T, bool, error), key func(T) string) []T {
	var out []T
	s.walk(dir, func(path string, data []byte) {
		obj, current, err := decode(data)
		if err != nil {
			klog.InfoS("Ignoring an unreadable image pull record", "path", path, "err", err)
			return
		}
		if !current {
			s.migrate(path, dir, fileName(key(obj)), obj)
		}
		out = append(out, obj)
	})
	return out
}

func (s *store) migrate(path, dir, name string, obj runtime.Object) {
	if err := s.write(dir, name, obj); err != nil {
		klog.ErrorS(err, "Failed to migrate an image pull record to kubelet.config.k8s.io/v1beta1", "path", path)
	}
}

// walk calls fn with each record file of dir, and removes temp files a crash
// left behind.
func (s *store) walk(dir string, fn func(path string, data []byte)) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		klog.ErrorS(err, "Failed to list image pull records", "dir", dir)
		return
	}
	for _, e := range entries {
		path := filepath.Join(dir, e.Name())
		if atomicfile.IsTemp(e.Name()) {
			if err := os.Remove(path); err != nil {
				klog.InfoS("Failed to remove a leftover temporary record", "path", path, "err", err)
			}
			continue
		}
		if !strings.HasPrefix(e.Name(), filePrefix) || !e.Type().IsRegular() {
			continue
		}
		data, err := readFile(path)
		if err != nil {
			klog.InfoS("Ignoring an unreadable image pull record", "path", path, "err", err)
			continue
		}
		fn(path, data)
	}
}

func (s *store) decodeIntent(data []byte) (*kubeletconfigv1beta1.ImagePullIntent, bool, error) {
	obj, err := s.decode(data)
	if err != nil {
		return nil, false, err
	}
	switch o := obj.(type) {
	case *kubeletconfigv1beta1.ImagePullIntent:
		o.TypeMeta = metav1.TypeMeta{}
		return o, true, nil
	case *kubeletconfigv1alpha1.ImagePullIntent:
		return &kubeletconfigv1beta1.ImagePullIntent{Image: o.Image}, false, nil
	}
	return nil, false, fmt.Errorf("%w: %T is not an ImagePullIntent", errUnreadable, obj)
}

func (s *store) decodeRecord(data []byte) (*kubeletconfigv1beta1.ImagePulledRecord, bool, error) {
	obj, err := s.decode(data)
	if err != nil {
		return nil, false, err
	}
	switch o := obj.(type) {
	case *kubeletconfigv1beta1.ImagePulledRecord:
		o.TypeMeta = metav1.TypeMeta{}
		return o, true, nil
	case *kubeletconfigv1alpha1.ImagePulledRecord:
		return recordFromV1alpha1(o), false, nil
	}
	return nil, false, fmt.Errorf("%w: %T is not an ImagePulledRecord", errUnreadable, obj)
}

func (s *store) decode(data []byte) (runtime.Object, error) {
	obj, _, err := s.decoder.Decode(data, nil, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errUnreadable, err)
	}
	return obj, nil
}

// recordFromV1alpha1 converts field by field: both versions have the same shape.
func recordFromV1alpha1(in *kubeletconfigv1alpha1.ImagePulledRecord) *kubeletconfigv1beta1.ImagePulledRecord {
	out := &kubeletconfigv1beta1.ImagePulledRecord{LastUpdatedTime: in.LastUpdatedTime, ImageRef: in.ImageRef}
	if in.CredentialMapping != nil {
		out.CredentialMapping = map[string]kubeletconfigv1beta1.ImagePullCredentials{}
	}
	for image, c := range in.CredentialMapping {
		creds := kubeletconfigv1beta1.ImagePullCredentials{NodePodsAccessible: c.NodePodsAccessible}
		for _, s := range c.KubernetesSecrets {
			creds.KubernetesSecrets = append(creds.KubernetesSecrets, kubeletconfigv1beta1.ImagePullSecret{
				UID: s.UID, Namespace: s.Namespace, Name: s.Name, CredentialHash: s.CredentialHash,
			})
		}
		for _, a := range c.KubernetesServiceAccounts {
			creds.KubernetesServiceAccounts = append(creds.KubernetesServiceAccounts, kubeletconfigv1beta1.ImagePullServiceAccount{
				UID: a.UID, Namespace: a.Namespace, Name: a.Name,
			})
		}
		out.CredentialMapping[image] = creds
	}
	return out
}

// write encodes obj as kubelet.config.k8s.io/v1beta1 JSON into dir/name,
// mode 0600, atomically: a crash leaves the old file or the new one.
func (s *store) write(dir, name string, obj runtime.Object) error {
	var buf bytes.Buffer
	if err := s.encoder.Encode(obj, &buf); err != nil {
		return fmt.Errorf("encoding %s: %w", name, err)
	}
	return s.writeFile(filepath.Join(dir, name), buf.Bytes(), 0o600)
}

// readFile reads a regular file without following a symlink, up to maxRecordSize.
func readFile(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%w: %s is not a regular file", errUnreadable, path)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxRecordSize+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxRecordSize {
		return nil, fmt.Errorf("%w: %s is larger than %d bytes", errUnreadable, path, maxRecordSize)
	}
	return data, nil
}

func removeFile(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return atomicfile.SyncDir(filepath.Dir(path))
}
