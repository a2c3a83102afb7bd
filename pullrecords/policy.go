// Package pullrecords remembers which credentials pulled which image and
// decides, under the imagePullCredentialsVerificationPolicy, whether a pod may
// use an image that is already on the node (KEP-2535, "ensure secret pulled
// images"). Records live under <root>/image_manager in the upstream kubelet's
// layout and format, so a node can switch between the two agents.
//
// The pure Decide says use the present image, pull with the pod's credentials,
// or refuse under Never. Pull intents (written before a pull) and pulled
// records are kept on disk with a cache in front.
package pullrecords

import (
	"fmt"
	"slices"
	"strings"

	"github.com/distribution/reference"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
)

// Policy is a compiled imagePullCredentialsVerificationPolicy with its allowlist.
type Policy struct {
	mode     kubeletconfigv1beta1.ImagePullCredentialsVerificationPolicy
	exact    []string
	prefixes []string // each ends with "/"
}

// NewPolicy compiles mode and allowlist; "" means the default,
// NeverVerifyPreloadedImages. The allowlist only counts for NeverVerifyAllowlistedImages.
func NewPolicy(mode kubeletconfigv1beta1.ImagePullCredentialsVerificationPolicy, allowlist []string) (Policy, error) {
	if mode == "" {
		mode = kubeletconfigv1beta1.NeverVerifyPreloadedImages
	}
	p := Policy{mode: mode}
	switch mode {
	case kubeletconfigv1beta1.NeverVerify, kubeletconfigv1beta1.NeverVerifyPreloadedImages, kubeletconfigv1beta1.AlwaysVerify:
	case kubeletconfigv1beta1.NeverVerifyAllowlistedImages:
		for _, pattern := range allowlist {
			norm, wildcard, err := allowlistPattern(pattern)
			if err != nil {
				return Policy{}, err
			}
			if wildcard {
				p.prefixes = append(p.prefixes, norm)
			} else {
				p.exact = append(p.exact, norm)
			}
		}
	default:
		return Policy{}, fmt.Errorf("unknown image pull credentials verification policy %q", mode)
	}
	return p, nil
}

// Mode is the policy's name.
func (p Policy) Mode() kubeletconfigv1beta1.ImagePullCredentialsVerificationPolicy { return p.mode }

// requiresVerification says whether a present image must be checked against the
// pull records. pulledByKubelet is false for preloaded images: present with
// neither a pulled record nor a pull intent.
func (p Policy) requiresVerification(image string, pulledByKubelet bool) bool {
	switch p.mode {
	case kubeletconfigv1beta1.NeverVerify:
		return false
	case kubeletconfigv1beta1.NeverVerifyPreloadedImages:
		return pulledByKubelet
	case kubeletconfigv1beta1.NeverVerifyAllowlistedImages:
		// Upstream exempts allowlisted images whoever pulled them.
		return !p.allowlisted(image)
	default:
		return true
	}
}

// allowlisted compares the image without tag and digest, not normalized: as
// upstream, "alpine" matches the entry "alpine" but not "docker.io/library/alpine".
func (p Policy) allowlisted(image string) bool {
	name, err := TrimTagDigest(image)
	if err != nil {
		return false
	}
	if slices.Contains(p.exact, name) {
		return true
	}
	for _, prefix := range p.prefixes {
		if strings.HasPrefix(name, prefix) {
			return true
		}
	}
	return false
}

// ValidateAllowlist checks preloadedImagesVerificationAllowlist entries: image
// names without tag or digest, optionally ending with a whole-segment "/*".
// It returns one error per bad entry, by index.
func ValidateAllowlist(patterns []string) map[int]error {
	errs := map[int]error{}
	for i, pattern := range patterns {
		if _, _, err := allowlistPattern(pattern); err != nil {
			errs[i] = err
		}
	}
	return errs
}

// allowlistPattern returns the name an entry matches exactly, or the prefix
// (ending with "/") a wildcard entry matches.
func allowlistPattern(pattern string) (string, bool, error) {
	if pattern != strings.TrimSpace(pattern) {
		return "", false, fmt.Errorf("leading or trailing spaces are not allowed: %q", pattern)
	}
	if prefix, ok := strings.CutSuffix(pattern, "/*"); ok {
		if prefix == "" {
			return "", false, fmt.Errorf("at least a registry host is required: %q", pattern)
		}
		if strings.Contains(prefix, "*") {
			return "", false, fmt.Errorf("only a trailing whole path segment wildcard '/*' is allowed: %q", pattern)
		}
		return prefix + "/", true, nil
	}
	if strings.Contains(pattern, "*") {
		return "", false, fmt.Errorf("only a trailing whole path segment wildcard '/*' is allowed: %q", pattern)
	}
	if named, err := parseNamed(pattern); err != nil || named.Name() != pattern {
		return "", false, fmt.Errorf("not an image name without tag or digest: %q", pattern)
	}
	return pattern, false, nil
}

// TrimTagDigest returns a container image field without its tag and digest,
// as written (not normalized): the key of a record's credentialMapping. The
// grammar is the docker reference grammar (github.com/distribution/reference).
func TrimTagDigest(image string) (string, error) {
	named, err := parseNamed(image)
	if err != nil {
		return "", err
	}
	return named.Name(), nil
}

// parseNamed parses image without normalizing it.
func parseNamed(image string) (reference.Named, error) {
	ref, err := reference.Parse(image)
	if err != nil {
		return nil, fmt.Errorf("invalid image %q: %w", image, err)
	}
	named, ok := ref.(reference.Named)
	if !ok {
		return nil, fmt.Errorf("invalid image %q: no name", image)
	}
	return named, nil
}
