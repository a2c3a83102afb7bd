package credentialprovider

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	kubeletconfigv1 "k8s.io/kubelet/config/v1"
	credentialproviderv1 "k8s.io/kubelet/pkg/apis/credentialprovider/v1"
	"k8s.io/utils/clock"
)

// execTimeout bounds one plugin run, as upstream's.
const execTimeout = time.Minute

// globalCacheKey is the cache key of a Global response.
const globalCacheKey = "global"

// Credential is one registry credential a plugin returned, under the
// pattern (a matchImages-like key) it is valid for.
type Credential struct {
	Pattern  string
	Username string
	Password string
}

// Option configures Providers.
type Option func(*Providers)

// WithClock sets the clock of the cache (tests).
func WithClock(c clock.Clock) Option { return func(p *Providers) { p.clock = c } }

// WithMetrics registers upstream's plugin metrics
// (kubelet_credential_provider_plugin_errors_total and
// kubelet_credential_provider_plugin_duration) in reg.
func WithMetrics(reg prometheus.Registerer) Option {
	return func(p *Providers) {
		p.errorsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: "kubelet", Name: "credential_provider_plugin_errors_total",
			Help: "Number of errors from credential provider plugin",
		}, []string{"plugin_name"})
		p.duration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Subsystem: "kubelet", Name: "credential_provider_plugin_duration",
			Help:    "Duration of execution in seconds for credential provider plugin",
			Buckets: prometheus.DefBuckets,
		}, []string{"plugin_name"})
		reg.MustRegister(p.errorsTotal, p.duration)
	}
}

// Providers are the node's credential provider plugins, in config order.
type Providers struct {
	clock       clock.Clock
	plugins     []*plugin
	errorsTotal *prometheus.CounterVec
	duration    *prometheus.HistogramVec
}

// plugin is one provider: its config, its executable and its cache.
type plugin struct {
	cfg kubeletconfigv1.CredentialProvider
	bin string

	// run is serialized per plugin: a burst of pulls of one registry runs the
	// plugin once and the others find its answer in the cache.
	run   sync.Mutex
	mu    sync.Mutex
	cache map[string]cacheEntry
}

type cacheEntry struct {
	creds   []Credential
	expires time.Time
}

func newProviders(cfgs []kubeletconfigv1.CredentialProvider, bins []string, opts ...Option) *Providers {
	p := &Providers{clock: clock.RealClock{}}
	for _, o := range opts {
		o(p)
	}
	for i := range cfgs {
		p.plugins = append(p.plugins, &plugin{cfg: cfgs[i], bin: bins[i], cache: map[string]cacheEntry{}})
	}
	return p
}

// Names lists the providers, in config order.
func (p *Providers) Names() []string {
	var out []string
	for _, pl := range p.plugins {
		out = append(out, pl.cfg.Name)
	}
	return out
}

// Provide returns the credentials the plugins matching image (a schemeless
// repository: "host[:port]/path", tag and digest removed) give for it, in
// config order: earlier providers' credentials are tried first. A plugin
// that fails is logged and gives nothing, as upstream: the pull goes on
// with the other credentials.
func (p *Providers) Provide(ctx context.Context, image string) []Credential {
	var out []Credential
	for _, pl := range p.plugins {
		if !pl.matches(image) {
			continue
		}
		creds, err := p.provide(ctx, pl, image)
		if err != nil {
			klog.FromContext(ctx).Error(err, "Failed getting credential from external registry credential provider", "provider", pl.cfg.Name, "image", image)
			continue
		}
		out = append(out, creds...)
	}
	return out
}

func (pl *plugin) matches(image string) bool {
	for _, m := range pl.cfg.MatchImages {
		if URLMatches(m, image) {
			return true
		}
	}
	return false
}

// cached returns the unexpired answer for image: cached by image, by
// registry or globally, in that order.
func (pl *plugin) cached(image string, now time.Time) ([]Credential, bool) {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	for _, key := range []string{image, registryOf(image), globalCacheKey} {
		e, ok := pl.cache[key]
		if !ok {
			continue
		}
		if !now.Before(e.expires) {
			delete(pl.cache, key)
			continue
		}
		return e.creds, true
	}
	return nil, false
}

func (p *Providers) provide(ctx context.Context, pl *plugin, image string) ([]Credential, error) {
	if creds, ok := pl.cached(image, p.clock.Now()); ok {
		return creds, nil
	}
	pl.run.Lock()
	defer pl.run.Unlock()
	if creds, ok := pl.cached(image, p.clock.Now()); ok {
		return creds, nil
	}
	start := p.clock.Now()
	resp, err := pl.exec(ctx, image)
	if p.duration != nil {
		p.duration.WithLabelValues(pl.cfg.Name).Observe(p.clock.Since(start).Seconds())
	}
	if err != nil {
		if p.errorsTotal != nil {
			p.errorsTotal.WithLabelValues(pl.cfg.Name).Inc()
		}
		return nil, err
	}
	creds, key, ttl, err := pl.decide(resp, image)
	if err != nil {
		if p.errorsTotal != nil {
			p.errorsTotal.WithLabelValues(pl.cfg.Name).Inc()
		}
		return nil, err
	}
	if ttl > 0 {
		now := p.clock.Now()
		pl.mu.Lock()
		for k, e := range pl.cache { // expired answers of other images go too
			if !now.Before(e.expires) {
				delete(pl.cache, k)
			}
		}
		pl.cache[key] = cacheEntry{creds: creds, expires: now.Add(ttl)}
		pl.mu.Unlock()
	}
	return creds, nil
}

// decide turns a plugin's response into credentials, the cache key and how
// long to cache them: the response's cacheDuration, else the provider's
// defaultCacheDuration; 0 caches nothing.
func (pl *plugin) decide(resp *credentialproviderv1.CredentialProviderResponse, image string) ([]Credential, string, time.Duration, error) {
	var key string
	switch resp.CacheKeyType {
	case credentialproviderv1.ImagePluginCacheKeyType:
		key = image
	case credentialproviderv1.RegistryPluginCacheKeyType:
		key = registryOf(image)
	case credentialproviderv1.GlobalPluginCacheKeyType:
		key = globalCacheKey
	default:
		return nil, "", 0, fmt.Errorf("credential provider plugin %s: invalid cacheKeyType %q (want Image, Registry or Global)", pl.cfg.Name, resp.CacheKeyType)
	}
	ttl := pl.cfg.DefaultCacheDuration.Duration
	if resp.CacheDuration != nil {
		ttl = resp.CacheDuration.Duration
	}
	creds := make([]Credential, 0, len(resp.Auth))
	for _, pattern := range slices.Sorted(maps.Keys(resp.Auth)) {
		a := resp.Auth[pattern]
		creds = append(creds, Credential{Pattern: pattern, Username: a.Username, Password: a.Password})
	}
	return creds, key, ttl, nil
}

// exec runs the plugin with the request on stdin and decodes its answer.
func (pl *plugin) exec(ctx context.Context, image string) (*credentialproviderv1.CredentialProviderResponse, error) {
	req, err := json.Marshal(credentialproviderv1.CredentialProviderRequest{
		TypeMeta: metav1.TypeMeta{APIVersion: pl.cfg.APIVersion, Kind: "CredentialProviderRequest"},
		Image:    image,
	})
	if err != nil {
		return nil, fmt.Errorf("encoding the request for credential provider plugin %s: %w", pl.cfg.Name, err)
	}
	ctx, cancel := context.WithTimeout(ctx, execTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, pl.bin, pl.cfg.Args...)
	cmd.Env = os.Environ()
	for _, e := range pl.cfg.Env {
		cmd.Env = append(cmd.Env, e.Name+"="+e.Value)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = bytes.NewReader(req), &stdout, &stderr
	cmd.WaitDelay = 5 * time.Second // a plugin's children holding stdout cannot hang the pull
	if err := cmd.Run(); err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return nil, fmt.Errorf("credential provider plugin %s for image %s timed out after %v", pl.cfg.Name, image, execTimeout)
		}
		return nil, fmt.Errorf("error execing credential provider plugin %s for image %s: %w: %s", pl.cfg.Name, image, err, bytes.TrimSpace(stderr.Bytes()))
	}
	var resp credentialproviderv1.CredentialProviderResponse
	if err := json.Unmarshal(stdout.Bytes(), &resp); err != nil {
		return nil, fmt.Errorf("decoding the response of credential provider plugin %s: %w", pl.cfg.Name, err)
	}
	if resp.APIVersion != pl.cfg.APIVersion {
		return nil, fmt.Errorf("apiVersion from credential plugin response did not match expected apiVersion:%s, actual apiVersion:%s", pl.cfg.APIVersion, resp.APIVersion)
	}
	if resp.Kind != "CredentialProviderResponse" {
		return nil, fmt.Errorf("kind from credential plugin response was not CredentialProviderResponse")
	}
	return &resp, nil
}
