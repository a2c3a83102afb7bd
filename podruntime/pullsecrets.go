package podruntime

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/url"
	"sort"
	"strings"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"

	"github.com/nodelet/nodelet/credentialprovider"
	"github.com/nodelet/nodelet/internal/podutil"
)

// defaultRegistryHost is the key Docker's config files use for Docker Hub
// (written as "https://index.docker.io/v1/"); images normalize to docker.io.
const defaultRegistryHost = "index.docker.io"

// dockerConfigEntry is one registry's entry in a .dockercfg / .dockerconfigjson.
type dockerConfigEntry struct {
	Username      string `json:"username,omitempty"`
	Password      string `json:"password,omitempty"`
	Email         string `json:"email,omitempty"`
	Auth          string `json:"auth,omitempty"`
	IdentityToken string `json:"identitytoken,omitempty"`
	RegistryToken string `json:"registrytoken,omitempty"`
}

// trackedAuth is a registry credential and, when it came from a pod's pull
// secret, that secret's coordinates and the credential's hash (what the pull
// records remember instead of the credential).
type trackedAuth struct {
	*runtimeapi.AuthConfig
	secret *kubeletconfigv1beta1.ImagePullSecret // nil when not from a pod secret
}

// keyring holds registry credentials indexed by schemeless location
// ("host[:port][/path]"), most specific first as upstream's keyring orders them.
type keyring struct {
	index []string
	creds map[string][]trackedAuth
}

// add records the entries of one docker config, keyed as the docker client does:
// the scheme and a leading /v1/ or /v2/ are ignored. src names the pull secret
// the config came from (nil for none).
func (k *keyring) add(cfg map[string]dockerConfigEntry, src *kubeletconfigv1beta1.ImagePullSecret) error {
	if k.creds == nil {
		k.creds = map[string][]trackedAuth{}
	}
	locs := make([]string, 0, len(cfg))
	for loc := range cfg {
		locs = append(locs, loc)
	}
	sort.Strings(locs) // deterministic order of credentials under one key
	type cred struct {
		key  string
		auth trackedAuth
	}
	// Parse everything first so a malformed entry leaves the keyring untouched.
	var parsed []cred
	for _, loc := range locs {
		e := cfg[loc]
		if e.Auth != "" && (e.Username == "" || e.Password == "") {
			raw, err := base64.StdEncoding.DecodeString(e.Auth)
			if err != nil {
				return fmt.Errorf("decoding the auth field of %q: %w", loc, err)
			}
			user, pass, ok := strings.Cut(string(raw), ":")
			if !ok {
				return fmt.Errorf("auth field of %q is not user:password", loc)
			}
			e.Username, e.Password = user, pass
		}
		value := loc
		if !strings.HasPrefix(value, "https://") && !strings.HasPrefix(value, "http://") {
			value = "https://" + value
		}
		u, err := url.Parse(value)
		if err != nil || u.Host == "" {
			klog.InfoS("Ignoring an unparsable registry location in a pull secret", "location", loc, "err", err)
			continue
		}
		p := u.Path
		if strings.HasPrefix(p, "/v1/") || strings.HasPrefix(p, "/v2/") {
			p = p[3:]
		}
		key := u.Host
		if p != "" && p != "/" {
			key += p
		}
		// ServerAddress stays empty: the runtime applies the auth to the image's own
		// registry, and containerd 1.6 rejects a schemeless host:port there.
		auth := trackedAuth{AuthConfig: &runtimeapi.AuthConfig{
			Username: e.Username, Password: e.Password, Auth: e.Auth,
			IdentityToken: e.IdentityToken, RegistryToken: e.RegistryToken,
		}}
		if src != nil {
			tracked := *src
			tracked.CredentialHash = credentialHash(e)
			auth.secret = &tracked
		}
		parsed = append(parsed, cred{key: key, auth: auth})
	}
	for _, c := range parsed {
		if _, seen := k.creds[c.key]; !seen {
			k.index = append(k.index, c.key)
		}
		k.creds[c.key] = append(k.creds[c.key], c.auth)
	}
	// Reverse lexical order puts longer (more specific) keys sharing a prefix first.
	sort.Sort(sort.Reverse(sort.StringSlice(k.index)))
	return nil
}

// lookup returns the credentials whose location matches repo (a normalized
// "host/path" without tag or digest), most specific first. Docker Hub images
// fall back to index.docker.io entries.
func (k *keyring) lookup(repo string) []trackedAuth {
	var out []trackedAuth
	for _, key := range k.index {
		if credentialprovider.URLMatches(key, repo) {
			out = append(out, k.creds[key]...)
		}
	}
	if len(out) > 0 {
		return out
	}
	if isDefaultRegistry(repo) {
		return k.creds[defaultRegistryHost]
	}
	return nil
}

// credentialHash identifies a credential without keeping it: the SHA-256 of
// the JSON upstream's kubelet hashes (username, password, email; auth decoded
// into the first two), so records match across the two agents. Tokens, which
// upstream leaves out, are added only when set.
func credentialHash(e dockerConfigEntry) string {
	data, err := json.Marshal(struct {
		Username      string `json:"username,omitempty"`
		Password      string `json:"password,omitempty"`
		Email         string `json:"email,omitempty"`
		IdentityToken string `json:"identitytoken,omitempty"`
		RegistryToken string `json:"registrytoken,omitempty"`
	}{e.Username, e.Password, e.Email, e.IdentityToken, e.RegistryToken})
	if err != nil {
		return "" // an empty hash never matches a record
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

func isDefaultRegistry(repo string) bool {
	host, _, _ := strings.Cut(repo, "/")
	return host == "docker.io" || host == defaultRegistryHost
}

// normalizeRepo turns an image reference into "host/path" without tag or
// digest, as the docker reference grammar does: no host means docker.io, a
// one-element Docker Hub path gains library/, index.docker.io becomes docker.io.
// An image that does not parse (refused as InvalidImageName before any pull)
// has no repository, which no credential matches.
func normalizeRepo(image string) string {
	named, err := podutil.ParseImage(image)
	if err != nil {
		return ""
	}
	return named.Name()
}

// parseDockerConfig reads the credentials of one pull secret.
func parseDockerConfig(s *v1.Secret) (map[string]dockerConfigEntry, error) {
	if b, ok := s.Data[v1.DockerConfigJsonKey]; ok && len(b) > 0 {
		var cfg struct {
			Auths map[string]dockerConfigEntry `json:"auths"`
		}
		if err := json.Unmarshal(b, &cfg); err != nil {
			return nil, fmt.Errorf("parsing %s: %w", v1.DockerConfigJsonKey, err)
		}
		return cfg.Auths, nil
	}
	if b, ok := s.Data[v1.DockerConfigKey]; ok && len(b) > 0 {
		var cfg map[string]dockerConfigEntry
		if err := json.Unmarshal(b, &cfg); err != nil {
			return nil, fmt.Errorf("parsing %s: %w", v1.DockerConfigKey, err)
		}
		return cfg, nil
	}
	return nil, fmt.Errorf("secret has neither %s nor %s", v1.DockerConfigJsonKey, v1.DockerConfigKey)
}

// providerCredentials returns what the node's credential provider plugins
// give for image, after the pod's pull secrets as upstream's union keyring
// orders them: node credentials, recorded by pull records as accessible to
// every pod on the node.
func (m *Manager) providerCredentials(ctx context.Context, image string) []trackedAuth {
	if m.deps.CredentialProviders == nil {
		return nil
	}
	creds := m.deps.CredentialProviders.Provide(ctx, normalizeRepo(image))
	if len(creds) == 0 {
		return nil
	}
	var k keyring
	// Earlier providers' credentials are tried first: added one by one, in
	// provider order, the keyring keeps that order under one key.
	for _, c := range creds {
		cfg := map[string]dockerConfigEntry{c.Pattern: {Username: c.Username, Password: c.Password}}
		if err := k.add(cfg, nil); err != nil {
			klog.FromContext(ctx).Info("Ignoring a malformed credential from a credential provider", "pattern", c.Pattern, "err", err)
		}
	}
	return k.lookup(normalizeRepo(image))
}

// pullCredentials returns the credentials of the pod's imagePullSecrets that
// apply to image. Missing or malformed secrets are skipped (upstream pulls
// without them) but reported, so a typo in a secret name is visible.
func (m *Manager) pullCredentials(ctx context.Context, pod *v1.Pod, image string) []trackedAuth {
	if len(pod.Spec.ImagePullSecrets) == 0 || m.deps.Env == nil {
		return nil
	}
	var k keyring
	for _, ref := range pod.Spec.ImagePullSecrets {
		if ref.Name == "" {
			continue
		}
		s, err := m.deps.Env.Secret(ctx, pod.Namespace, ref.Name)
		if err == nil && s == nil {
			err = apierrors.NewNotFound(v1.Resource("secrets"), ref.Name)
		}
		if err != nil {
			klog.InfoS("Unable to retrieve pull secret, the image pull may not succeed", "pod", klog.KObj(pod), "secret", klog.KRef(pod.Namespace, ref.Name), "err", err)
			m.deps.Recorder.Eventf(pod, v1.EventTypeWarning, "FailedToRetrieveImagePullSecret", "Unable to retrieve some image pull secrets (%s); attempting to pull the image may not succeed.", ref.Name)
			continue
		}
		cfg, err := parseDockerConfig(s)
		if err == nil {
			err = k.add(cfg, &kubeletconfigv1beta1.ImagePullSecret{UID: string(s.UID), Namespace: pod.Namespace, Name: ref.Name})
		}
		if err != nil {
			klog.InfoS("Ignoring a malformed pull secret", "pod", klog.KObj(pod), "secret", klog.KRef(pod.Namespace, ref.Name), "err", err)
			continue
		}
	}
	return k.lookup(normalizeRepo(image))
}

// podSecrets lists the pod secrets among creds, as the pull records know them.
func podSecrets(creds []trackedAuth) []kubeletconfigv1beta1.ImagePullSecret {
	var out []kubeletconfigv1beta1.ImagePullSecret
	for _, c := range creds {
		if c.secret != nil {
			out = append(out, *c.secret)
		}
	}
	return out
}

// pulledWith says what a successful pull with used (nil: anonymous) lets other
// pods do: a pod secret's credential is recorded as that secret, anything else
// makes the image usable by every pod on the node.
func pulledWith(used *trackedAuth) *kubeletconfigv1beta1.ImagePullCredentials {
	if used == nil || used.secret == nil {
		return &kubeletconfigv1beta1.ImagePullCredentials{NodePodsAccessible: true}
	}
	return &kubeletconfigv1beta1.ImagePullCredentials{KubernetesSecrets: []kubeletconfigv1beta1.ImagePullSecret{*used.secret}}
}
