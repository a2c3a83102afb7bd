package pullrecords

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/clock"
)

// ImageStatuser finds an image on the node (the CRI image service).
type ImageStatuser interface {
	ImageStatus(ctx context.Context, image *runtimeapi.ImageSpec, verbose bool) (*runtimeapi.ImageStatusResponse, error)
}

// Manager keeps the pull intents and pulled records on disk, with an in-memory
// cache in front (nodelet is their only writer), and answers Verify with Decide.
//
// Intents are keyed by image name, records by image ID, so a pod naming the
// same image another way (by digest) finds neither between a pull's end and
// its record: Verify then asks which IDs the pulls in flight resolve to. A
// record is cached before it is written, and a failed write is retried by
// every later call, the pull's intent kept until it lands.
type Manager struct {
	policy Policy
	store  *store
	images ImageStatuser
	clock  clock.PassiveClock

	mu      sync.Mutex
	records map[string]cachedRecord // by image ID
	intents map[string]int          // pulls in flight, by container image
	// unsaved are the image IDs whose cached record is not on disk yet (its
	// write failed), with the images whose pull intents wait for it.
	unsaved map[string][]string
}

type cachedRecord struct {
	rec        *kubeletconfigv1beta1.ImagePulledRecord
	unreadable bool
}

// Open loads the records under rootDir: records of older API versions are
// rewritten in the current one, and intents left by a pull that a restart
// interrupted become records without credentials when the image did arrive,
// so the next pod using it has to prove its credentials.
func Open(ctx context.Context, rootDir string, policy Policy, images ImageStatuser, clk clock.PassiveClock) (*Manager, error) {
	s, err := newStore(rootDir)
	if err != nil {
		return nil, fmt.Errorf("opening image pull records: %w", err)
	}
	m := &Manager{
		policy: policy, store: s, images: images, clock: clk,
		records: map[string]cachedRecord{}, intents: map[string]int{}, unsaved: map[string][]string{},
	}
	s.migrateRecords()
	logger := klog.FromContext(ctx)
	for _, intent := range s.listIntents() {
		resp, err := images.ImageStatus(ctx, &runtimeapi.ImageSpec{Image: intent.Image}, false)
		if err != nil {
			logger.Info("Keeping an image pull intent: the image status is unknown", "image", intent.Image, "err", err)
			continue
		}
		ref := resp.GetImage().GetId()
		if ref == "" {
			continue // the intent stays: should the image appear, it counts as pulled by nodelet
		}
		m.mu.Lock()
		err = m.mergeLocked(ctx, intent.Image, ref, nil)
		if err == nil {
			err = s.deleteIntent(intent.Image)
		}
		m.mu.Unlock()
		if err != nil {
			logger.Error(err, "Failed to turn an interrupted image pull into a pulled record", "image", intent.Image, "imageRef", ref)
		}
	}
	logger.Info("Image pull records loaded", "dir", s.pulledDir, "policy", policy.Mode())
	return m, nil
}

// Verify decides whether a pod may run image (its container's image field),
// present as imageRef ("" when absent). podSecrets lists the pod's pull secrets
// matching the image; it is called, outside the lock, only when a record could
// vouch for them, since it reads the secrets from the API server.
func (m *Manager) Verify(ctx context.Context, pullPolicy v1.PullPolicy, image, imageRef string, podSecrets func() []kubeletconfigv1beta1.ImagePullSecret) Decision {
	logger := klog.FromContext(ctx)
	in := Input{Policy: m.policy, PullPolicy: pullPolicy, Image: image, Present: imageRef != ""}
	if in.Present && pullPolicy != v1.PullAlways {
		m.mu.Lock()
		m.flushLocked(ctx)
		o := m.originLocked(ctx, image, imageRef)
		inFlight := slices.Sorted(maps.Keys(m.intents))
		m.mu.Unlock()
		if !o.known() && len(inFlight) > 0 {
			// Outside the lock: the runtime is asked. A pull that ends
			// meanwhile has its record cached before its intent goes, so
			// either this listing or the record shows it.
			o.inFlightIDs, o.inFlightUnknown = m.resolve(ctx, inFlight)
		}
		in.Record, in.RecordsUnreadable = o.rec, o.unreadable
		in.PulledByKubelet = pulledByNodelet(o, imageRef)
		// Records are replaced, never changed in place: in.Record stays valid.
		if in.Record != nil && podSecrets != nil {
			in.PodSecrets = podSecrets()
		}
	}
	d := Decide(in)
	logger.V(4).Info("Verified image pull credentials", "image", image, "imageRef", imageRef, "action", d.Action, "reason", d.Reason)
	if d.Learn != nil {
		creds := &kubeletconfigv1beta1.ImagePullCredentials{KubernetesSecrets: []kubeletconfigv1beta1.ImagePullSecret{*d.Learn}}
		m.mu.Lock()
		err := m.mergeLocked(ctx, image, imageRef, creds)
		m.mu.Unlock()
		if err != nil {
			logger.Error(err, "Failed to record a matching pull secret", "image", image, "imageRef", imageRef)
		}
	}
	return d
}

// originLocked collects what the records and intents say about image,
// present as imageRef.
func (m *Manager) originLocked(ctx context.Context, image, imageRef string) origin {
	c := m.recordLocked(ctx, imageRef)
	o := origin{rec: c.rec, unreadable: c.unreadable, intent: m.intents[image] > 0}
	if o.known() {
		return o
	}
	exists, err := m.store.intentExists(image)
	if err != nil {
		klog.FromContext(ctx).Info("Ignoring an unreadable image pull intent", "image", image, "err", err)
		o.unreadable = true
	}
	o.intent = exists
	return o
}

// resolve returns the image IDs the images being pulled have now (none for
// one not present yet), and whether any could not be asked.
func (m *Manager) resolve(ctx context.Context, images []string) ([]string, bool) {
	var ids []string
	unknown := false
	for _, image := range images {
		resp, err := m.images.ImageStatus(ctx, &runtimeapi.ImageSpec{Image: image}, false)
		if err != nil {
			klog.FromContext(ctx).Info("Image status of a pull in flight unknown", "image", image, "err", err)
			unknown = true
			continue
		}
		if id := resp.GetImage().GetId(); id != "" {
			ids = append(ids, id)
		}
	}
	return ids, unknown
}

// RecordPullIntent notes, before a pull, that nodelet is pulling image, so a
// crash mid-pull cannot make the image look preloaded.
func (m *Manager) RecordPullIntent(ctx context.Context, image string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.flushLocked(ctx)
	if err := m.store.writeIntent(image); err != nil {
		return fmt.Errorf("recording the intent to pull %s: %w", image, err)
	}
	m.intents[image]++
	return nil
}

// RecordImagePulled records that creds pulled image as imageRef. When the record
// cannot be written it counts from memory and is written again by the next
// call; the intent stays until it is, so a restart meanwhile still finds the
// image pulled by nodelet.
func (m *Manager) RecordImagePulled(ctx context.Context, image, imageRef string, creds *kubeletconfigv1beta1.ImagePullCredentials) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.flushLocked(ctx)
	if err := m.mergeLocked(ctx, image, imageRef, creds); err != nil {
		klog.FromContext(ctx).Error(err, "Failed to write an image pulled record", "image", image, "imageRef", imageRef)
		if waiting, unsaved := m.unsaved[imageRef]; unsaved {
			m.unsaved[imageRef] = append(waiting, image)
		}
		return
	}
	m.releaseIntentLocked(ctx, image)
}

// RecordImagePullFailed ends a pull that RecordPullIntent began.
func (m *Manager) RecordImagePullFailed(ctx context.Context, image string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.releaseIntentLocked(ctx, image)
}

// releaseIntentLocked drops one in-flight pull of image; the intent file goes
// with the last one.
func (m *Manager) releaseIntentLocked(ctx context.Context, image string) {
	if m.intents[image] > 1 {
		m.intents[image]--
		return
	}
	if err := m.store.deleteIntent(image); err != nil {
		klog.FromContext(ctx).Error(err, "Failed to remove an image pull intent", "image", image)
		return
	}
	delete(m.intents, image)
}

// recordLocked returns imageRef's record through the cache; a file that does
// not decode is logged and reported unreadable, never fatal.
func (m *Manager) recordLocked(ctx context.Context, imageRef string) cachedRecord {
	if c, ok := m.records[imageRef]; ok {
		return c
	}
	rec, err := m.store.record(imageRef)
	c := cachedRecord{rec: rec}
	if err != nil {
		klog.FromContext(ctx).Info("Ignoring an unreadable image pulled record", "imageRef", imageRef, "err", err)
		c = cachedRecord{unreadable: true}
	}
	m.records[imageRef] = c
	return c
}

// mergeLocked adds creds to imageRef's record and writes it when it changed. An
// unreadable record is replaced.
func (m *Manager) mergeLocked(ctx context.Context, image, imageRef string, creds *kubeletconfigv1beta1.ImagePullCredentials) error {
	c := m.recordLocked(ctx, imageRef)
	rec, changed, err := Merge(c.rec, imageRef, image, creds, m.clock.Now())
	if err != nil {
		return fmt.Errorf("recording the pull of %s: %w", image, err)
	}
	if changed {
		// Cached first: the record counts even if the write below fails.
		m.records[imageRef] = cachedRecord{rec: rec}
	} else if _, unsaved := m.unsaved[imageRef]; !unsaved {
		return nil
	}
	return m.saveLocked(ctx, imageRef)
}

// saveLocked writes imageRef's cached record. A failure leaves it unsaved
// for the next call to retry; success releases the intents that waited for it.
func (m *Manager) saveLocked(ctx context.Context, imageRef string) error {
	if err := m.store.writeRecord(m.records[imageRef].rec); err != nil {
		if _, ok := m.unsaved[imageRef]; !ok {
			m.unsaved[imageRef] = nil
		}
		return fmt.Errorf("writing the pulled record of %s: %w", imageRef, err)
	}
	waiting := m.unsaved[imageRef]
	delete(m.unsaved, imageRef)
	for _, image := range waiting {
		m.releaseIntentLocked(ctx, image)
	}
	return nil
}

// flushLocked retries the writes that failed.
func (m *Manager) flushLocked(ctx context.Context) {
	for _, imageRef := range slices.Sorted(maps.Keys(m.unsaved)) {
		if err := m.saveLocked(ctx, imageRef); err != nil {
			klog.FromContext(ctx).Error(err, "Failed again to write an image pulled record", "imageRef", imageRef)
		}
	}
}
