package pullrecords

import (
	"fmt"
	"slices"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
)

// learnLimit caps the credentials a check may add to one image's record (a pod
// whose secret matches by hash or by coordinates only), so namespace churn cannot
// grow records without bound. Upstream uses the same limit.
const learnLimit = 100

// Action is what to do about a container's image.
type Action int

const (
	// UsePresent runs the container from the image already on the node.
	UsePresent Action = iota
	// Pull pulls the image with the pod's own credentials.
	Pull
	// RefuseNeverPull fails the container with ErrImageNeverPull.
	RefuseNeverPull
)

func (a Action) String() string {
	switch a {
	case UsePresent:
		return "UsePresent"
	case Pull:
		return "Pull"
	case RefuseNeverPull:
		return "RefuseNeverPull"
	}
	return fmt.Sprintf("Action(%d)", int(a))
}

// Input is everything the decision depends on.
type Input struct {
	Policy     Policy
	PullPolicy v1.PullPolicy
	// Image is the container's image field.
	Image string
	// Present says the image is on the node.
	Present bool
	// PulledByKubelet says a pulled record or a pull intent exists for the image;
	// false means preloaded.
	PulledByKubelet bool
	// RecordsUnreadable says a record or intent file could not be decoded: the
	// records cannot vouch for anything, so the image must be verified.
	RecordsUnreadable bool
	// Record is the image's pulled record, nil when there is none.
	Record *kubeletconfigv1beta1.ImagePulledRecord
	// PodSecrets are the pod's pull secrets whose registry matches the image.
	PodSecrets []kubeletconfigv1beta1.ImagePullSecret
}

// origin is what is known of where a present image came from.
type origin struct {
	rec        *kubeletconfigv1beta1.ImagePulledRecord // its image ID's record, written or not yet
	unreadable bool                                    // a record or intent file does not decode
	intent     bool                                    // a pull intent for the image's own name
	// inFlightIDs are the image IDs the images of the pulls in flight have
	// now; inFlightUnknown says the runtime could not be asked for one.
	inFlightIDs     []string
	inFlightUnknown bool
}

// known: the records alone say the image was pulled by nodelet.
func (o origin) known() bool { return o.rec != nil || o.unreadable || o.intent }

// pulledByNodelet says whether the image present as imageRef may have come
// from a pull by nodelet, so that it is not preloaded. A pull in flight whose
// image already has imageRef counts: its record is about to land under the
// other name's pull (a tag), while this pod names it another way (a digest).
// A pull in flight the runtime could not be asked about counts too.
func pulledByNodelet(o origin, imageRef string) bool {
	return o.known() || o.inFlightUnknown || slices.Contains(o.inFlightIDs, imageRef)
}

// Decision is the outcome of Decide.
type Decision struct {
	Action Action
	// Reason says why, for logs.
	Reason string
	// Learn, when set, is a pod secret the record should now list for the image:
	// it matched a recorded one by credential hash or by coordinates only.
	Learn *kubeletconfigv1beta1.ImagePullSecret
}

// Decide says whether a container may use its image as present, must pull it
// (verifying the pod's credentials against the registry), or must fail.
func Decide(in Input) Decision {
	if in.PullPolicy == v1.PullAlways {
		return Decision{Action: Pull, Reason: "pull policy Always"}
	}
	if !in.Present {
		return mustVerify(in, "image not present")
	}
	if in.RecordsUnreadable {
		return mustVerify(in, "pull records unreadable")
	}
	if !in.Policy.requiresVerification(in.Image, in.PulledByKubelet) {
		return Decision{Action: UsePresent, Reason: fmt.Sprintf("policy %s does not verify this image (pulled by nodelet: %t)", in.Policy.mode, in.PulledByKubelet)}
	}
	if in.Record == nil {
		return mustVerify(in, "no pulled record")
	}
	name, err := TrimTagDigest(in.Image)
	if err != nil {
		return mustVerify(in, err.Error())
	}
	cached, ok := in.Record.CredentialMapping[name]
	if !ok {
		return mustVerify(in, fmt.Sprintf("no credentials recorded for %s", name))
	}
	if cached.NodePodsAccessible {
		return Decision{Action: UsePresent, Reason: "pulled without pod credentials: every pod may use it"}
	}
	if matched, learn := matchSecrets(in.PodSecrets, cached.KubernetesSecrets); matched {
		return Decision{Action: UsePresent, Reason: "pulled with the pod's credentials", Learn: learn}
	}
	return mustVerify(in, "the pod's credentials never pulled this image")
}

func mustVerify(in Input, why string) Decision {
	if in.PullPolicy == v1.PullNever {
		return Decision{Action: RefuseNeverPull, Reason: why}
	}
	return Decision{Action: Pull, Reason: why}
}

// matchSecrets finds a pod secret that pulled the image before: same credential
// hash (a copy of the secret elsewhere), or same namespace/name/UID (the secret
// was rotated). A partial match is returned for the record to learn.
func matchSecrets(pod, cached []kubeletconfigv1beta1.ImagePullSecret) (bool, *kubeletconfigv1beta1.ImagePullSecret) {
	room := len(cached) < learnLimit
	for _, ps := range pod {
		for _, cs := range cached {
			hashes := cs.CredentialHash != "" && ps.CredentialHash == cs.CredentialHash
			coords := ps.UID == cs.UID && ps.Namespace == cs.Namespace && ps.Name == cs.Name
			switch {
			case hashes && coords:
				return true, nil
			case hashes:
				if room {
					return true, &ps
				}
				return true, nil
			case coords && room:
				// A rotated secret is trusted only while the record may still grow.
				return true, &ps
			}
		}
	}
	return false, nil
}

// Merge adds creds for image (the container's image field) to rec, creating the
// record when rec is nil. nil creds record the image as pulled by nodelet with
// no credential, which forces verification next time. It returns the record to
// write and whether it changed; rec itself is never modified.
func Merge(rec *kubeletconfigv1beta1.ImagePulledRecord, imageRef, image string, creds *kubeletconfigv1beta1.ImagePullCredentials, now time.Time) (*kubeletconfigv1beta1.ImagePulledRecord, bool, error) {
	name, err := TrimTagDigest(image)
	if err != nil {
		return rec, false, err
	}
	if rec == nil {
		out := &kubeletconfigv1beta1.ImagePulledRecord{
			LastUpdatedTime:   metav1.NewTime(now),
			ImageRef:          imageRef,
			CredentialMapping: map[string]kubeletconfigv1beta1.ImagePullCredentials{},
		}
		if creds != nil {
			out.CredentialMapping[name] = *creds.DeepCopy()
		}
		return out, true, nil
	}
	if creds == nil || (!creds.NodePodsAccessible && len(creds.KubernetesSecrets) == 0 && len(creds.KubernetesServiceAccounts) == 0) {
		return rec, false, nil
	}
	cur, found := rec.CredentialMapping[name]
	var next kubeletconfigv1beta1.ImagePullCredentials
	switch {
	case !found:
		next = *creds.DeepCopy()
	case cur.NodePodsAccessible:
		return rec, false, nil
	case creds.NodePodsAccessible:
		next = kubeletconfigv1beta1.ImagePullCredentials{NodePodsAccessible: true}
	default:
		secrets, changedS := mergeSecrets(cur.KubernetesSecrets, creds.KubernetesSecrets)
		accounts, changedA := mergeAccounts(cur.KubernetesServiceAccounts, creds.KubernetesServiceAccounts)
		if !changedS && !changedA {
			return rec, false, nil
		}
		next = kubeletconfigv1beta1.ImagePullCredentials{KubernetesSecrets: secrets, KubernetesServiceAccounts: accounts}
	}
	out := rec.DeepCopy()
	if out.CredentialMapping == nil {
		out.CredentialMapping = map[string]kubeletconfigv1beta1.ImagePullCredentials{}
	}
	out.CredentialMapping[name] = next
	out.LastUpdatedTime = metav1.NewTime(now)
	return out, true, nil
}

type coordinates struct{ namespace, name, uid string }

// mergeSecrets unions by namespace/name/UID, the new hash winning, sorted.
func mergeSecrets(cur, add []kubeletconfigv1beta1.ImagePullSecret) ([]kubeletconfigv1beta1.ImagePullSecret, bool) {
	byCoords := map[coordinates]string{}
	for _, s := range cur {
		byCoords[coordinates{s.Namespace, s.Name, s.UID}] = s.CredentialHash
	}
	changed := false
	for _, s := range add {
		k := coordinates{s.Namespace, s.Name, s.UID}
		if h, ok := byCoords[k]; !ok || h != s.CredentialHash {
			byCoords[k] = s.CredentialHash
			changed = true
		}
	}
	if !changed {
		return cur, false
	}
	out := make([]kubeletconfigv1beta1.ImagePullSecret, 0, len(byCoords))
	for k, h := range byCoords {
		out = append(out, kubeletconfigv1beta1.ImagePullSecret{Namespace: k.namespace, Name: k.name, UID: k.uid, CredentialHash: h})
	}
	slices.SortFunc(out, func(a, b kubeletconfigv1beta1.ImagePullSecret) int {
		return compareCoords(coordinates{a.Namespace, a.Name, a.UID}, coordinates{b.Namespace, b.Name, b.UID})
	})
	return out, true
}

// mergeAccounts unions service account coordinates (nodelet records none, but
// keeps those the upstream kubelet wrote).
func mergeAccounts(cur, add []kubeletconfigv1beta1.ImagePullServiceAccount) ([]kubeletconfigv1beta1.ImagePullServiceAccount, bool) {
	out := slices.Clone(cur)
	changed := false
	for _, a := range add {
		if !slices.Contains(out, a) {
			out = append(out, a)
			changed = true
		}
	}
	if !changed {
		return cur, false
	}
	slices.SortFunc(out, func(a, b kubeletconfigv1beta1.ImagePullServiceAccount) int {
		return compareCoords(coordinates{a.Namespace, a.Name, a.UID}, coordinates{b.Namespace, b.Name, b.UID})
	})
	return out, true
}

func compareCoords(a, b coordinates) int {
	if c := strings.Compare(a.namespace, b.namespace); c != 0 {
		return c
	}
	if c := strings.Compare(a.name, b.name); c != 0 {
		return c
	}
	return strings.Compare(a.uid, b.uid)
}
