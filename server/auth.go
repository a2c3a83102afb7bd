package server

import (
	"container/heap"
	"container/list"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
)

// User is an authenticated caller.
type User struct {
	Name   string
	UID    string
	Groups []string
	Extra  map[string][]string
}

// The identity of a request without credentials when anonymous access is on (as upstream).
const (
	AnonymousUser        = "system:anonymous"
	UnauthenticatedGroup = "system:unauthenticated"
	AuthenticatedGroup   = "system:authenticated"
)

// Authenticator says who sent a request. ok=false with a nil error means the request
// carried no credentials this authenticator understands; an error means it carried
// credentials that are not valid.
type Authenticator interface {
	Authenticate(r *http.Request) (user *User, ok bool, err error)
}

// Attributes is what the authorizer is asked about: a request against the Node object.
type Attributes struct {
	User        *User
	Verb        string
	Resource    string // always "nodes"
	Subresource string
	Name        string // the node name
	Path        string
}

// Authorizer decides whether a request may proceed.
type Authorizer interface {
	Authorize(ctx context.Context, a Attributes) (allowed bool, reason string, err error)
}

// ---------------------------------------------------------------- authentication

// X509Authenticator accepts client certificates that chain to the client CA: user from
// the subject's CN, groups from its O.
type X509Authenticator struct {
	Roots *x509.CertPool
	Clock clock.PassiveClock
}

func (a *X509Authenticator) Authenticate(r *http.Request) (*User, bool, error) {
	if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		return nil, false, nil
	}
	certs := r.TLS.PeerCertificates
	opts := x509.VerifyOptions{
		Roots:         a.Roots,
		Intermediates: x509.NewCertPool(),
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if a.Clock != nil {
		opts.CurrentTime = a.Clock.Now()
	}
	for _, c := range certs[1:] {
		opts.Intermediates.AddCert(c)
	}
	if _, err := certs[0].Verify(opts); err != nil {
		return nil, false, fmt.Errorf("verifying the client certificate %q: %w", certs[0].Subject.CommonName, err)
	}
	cn := certs[0].Subject.CommonName
	if cn == "" {
		return nil, false, errors.New("client certificate has no common name")
	}
	return &User{Name: cn, Groups: append([]string(nil), certs[0].Subject.Organization...)}, true, nil
}

// TokenReviewer is the API call the webhook token authenticator makes
// (client-go's TokenReviewInterface has it).
type TokenReviewer interface {
	Create(ctx context.Context, tr *authenticationv1.TokenReview, opts metav1.CreateOptions) (*authenticationv1.TokenReview, error)
}

// TokenAuthenticator checks bearer tokens with a TokenReview and caches the answer
// (both outcomes) for TTL, as upstream's cached webhook authenticator does.
type TokenAuthenticator struct {
	Client  TokenReviewer
	TTL     time.Duration
	Timeout time.Duration
	cache   *ttlCache[tokenResult]
}

type tokenResult struct {
	user *User
	ok   bool
}

// NewTokenAuthenticator returns a TokenReview authenticator with a cache of ttl.
func NewTokenAuthenticator(client TokenReviewer, ttl time.Duration, clk clock.PassiveClock) *TokenAuthenticator {
	return &TokenAuthenticator{Client: client, TTL: ttl, Timeout: 10 * time.Second, cache: newTTLCache[tokenResult](clk, 4096)}
}

func (a *TokenAuthenticator) Authenticate(r *http.Request) (*User, bool, error) {
	auth := strings.TrimSpace(r.Header.Get("Authorization"))
	if auth == "" {
		return nil, false, nil
	}
	scheme, token, found := strings.Cut(auth, " ")
	if !found || !strings.EqualFold(scheme, "bearer") {
		return nil, false, nil
	}
	token = strings.TrimSpace(token)
	if token == "" {
		return nil, false, nil
	}
	sum := sha256.Sum256([]byte(token))
	key := hex.EncodeToString(sum[:])
	if res, hit := a.cache.get(key); hit {
		if !res.ok {
			return nil, false, errors.New("invalid bearer token")
		}
		return res.user, true, nil
	}
	ctx, cancel := context.WithTimeout(r.Context(), a.Timeout)
	defer cancel()
	resp, err := a.Client.Create(ctx, &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
	if err != nil {
		// Not cached: the API server may be back on the next request.
		return nil, false, fmt.Errorf("reviewing the bearer token: %w", err)
	}
	res := tokenResult{ok: resp.Status.Authenticated}
	if res.ok {
		u := resp.Status.User
		res.user = &User{Name: u.Username, UID: u.UID, Groups: u.Groups}
		if len(u.Extra) > 0 {
			res.user.Extra = map[string][]string{}
			for k, v := range u.Extra {
				res.user.Extra[k] = v
			}
		}
	}
	a.cache.set(key, res, a.TTL)
	if !res.ok {
		return nil, false, errors.New("invalid bearer token")
	}
	return res.user, true, nil
}

// UnionAuthenticator tries each authenticator in turn. Invalid credentials fail the
// request even when anonymous access is on (upstream's fail-on-error union); only a
// request with no credentials at all becomes system:anonymous.
type UnionAuthenticator struct {
	Authenticators []Authenticator
	Anonymous      bool
}

func (u *UnionAuthenticator) Authenticate(r *http.Request) (*User, bool, error) {
	var errs []error
	for _, a := range u.Authenticators {
		user, ok, err := a.Authenticate(r)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if ok {
			if !contains(user.Groups, AuthenticatedGroup) {
				// user may be shared (the token cache hands the same *User to every
				// request with that token): change a copy, never it.
				cp := *user
				cp.Groups = append(append([]string(nil), user.Groups...), AuthenticatedGroup)
				user = &cp
			}
			return user, true, nil
		}
	}
	if len(errs) > 0 {
		return nil, false, errors.Join(errs...)
	}
	if u.Anonymous {
		return &User{Name: AnonymousUser, Groups: []string{UnauthenticatedGroup}}, true, nil
	}
	return nil, false, nil
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// ---------------------------------------------------------------- authorization

// AlwaysAllow is authorization.mode AlwaysAllow.
type AlwaysAllow struct{}

func (AlwaysAllow) Authorize(context.Context, Attributes) (bool, string, error) { return true, "", nil }

// SubjectAccessReviewer is the API call the webhook authorizer makes.
type SubjectAccessReviewer interface {
	Create(ctx context.Context, sar *authorizationv1.SubjectAccessReview, opts metav1.CreateOptions) (*authorizationv1.SubjectAccessReview, error)
}

// WebhookAuthorizer asks the API server with a SubjectAccessReview and caches allowed
// answers for AllowTTL and denied ones for DenyTTL (upstream: 5m and 30s).
type WebhookAuthorizer struct {
	Client   SubjectAccessReviewer
	AllowTTL time.Duration
	DenyTTL  time.Duration
	Timeout  time.Duration
	cache    *ttlCache[sarResult]
}

type sarResult struct {
	allowed bool
	reason  string
}

// NewWebhookAuthorizer returns a SubjectAccessReview authorizer with its cache.
func NewWebhookAuthorizer(client SubjectAccessReviewer, allowTTL, denyTTL time.Duration, clk clock.PassiveClock) *WebhookAuthorizer {
	return &WebhookAuthorizer{Client: client, AllowTTL: allowTTL, DenyTTL: denyTTL, Timeout: 10 * time.Second, cache: newTTLCache[sarResult](clk, 4096)}
}

func (a *WebhookAuthorizer) Authorize(ctx context.Context, attrs Attributes) (bool, string, error) {
	spec := authorizationv1.SubjectAccessReviewSpec{
		User:   attrs.User.Name,
		UID:    attrs.User.UID,
		Groups: attrs.User.Groups,
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Verb:        attrs.Verb,
			Version:     "v1",
			Resource:    attrs.Resource,
			Subresource: attrs.Subresource,
			Name:        attrs.Name,
		},
	}
	if len(attrs.User.Extra) > 0 {
		spec.Extra = map[string]authorizationv1.ExtraValue{}
		for k, v := range attrs.User.Extra {
			spec.Extra[k] = v
		}
	}
	key := sarKey(spec)
	if res, hit := a.cache.get(key); hit {
		return res.allowed, res.reason, nil
	}
	ctx, cancel := context.WithTimeout(ctx, a.Timeout)
	defer cancel()
	resp, err := a.Client.Create(ctx, &authorizationv1.SubjectAccessReview{Spec: spec}, metav1.CreateOptions{})
	if err != nil {
		return false, "", fmt.Errorf("creating a SubjectAccessReview: %w", err)
	}
	res := sarResult{allowed: resp.Status.Allowed && !resp.Status.Denied, reason: resp.Status.Reason}
	ttl := a.DenyTTL
	if res.allowed {
		ttl = a.AllowTTL
	}
	a.cache.set(key, res, ttl)
	return res.allowed, res.reason, nil
}

// sarKey identifies a review in the cache. Every string is length-prefixed and every
// list counted, so no two different reviews share a key (joined with a separator,
// groups ["a","b"] and ["a,b"] would), whatever bytes the names hold.
func sarKey(s authorizationv1.SubjectAccessReviewSpec) string {
	var b strings.Builder
	str := func(v string) {
		b.WriteString(strconv.Itoa(len(v)))
		b.WriteByte(':')
		b.WriteString(v)
	}
	list := func(vs []string) {
		str(strconv.Itoa(len(vs)))
		for _, v := range vs {
			str(v)
		}
	}
	ra := s.ResourceAttributes
	for _, v := range []string{s.User, s.UID, ra.Verb, ra.Resource, ra.Subresource, ra.Name} {
		str(v)
	}
	list(s.Groups)
	keys := slices.Sorted(maps.Keys(s.Extra))
	list(keys)
	for _, k := range keys {
		list(s.Extra[k])
	}
	return b.String()
}

// ---------------------------------------------------------------- route -> attributes

// verbFor maps the HTTP method to the API verb as upstream does. A websocket upgrade
// arrives as GET and is authorized as get (upstream keeps that; see kubernetes#136550).
func verbFor(method string) string {
	switch method {
	case http.MethodPost:
		return "create"
	case http.MethodGet:
		return "get"
	case http.MethodPut:
		return "update"
	case http.MethodPatch:
		return "patch"
	case http.MethodDelete:
		return "delete"
	}
	return ""
}

func isSubpath(p, prefix string) bool {
	p, prefix = strings.TrimSuffix(p, "/"), strings.TrimSuffix(prefix, "/")
	return p == prefix || strings.HasPrefix(p, prefix+"/")
}

// subresourcesFor returns the subresources a registered ServeMux pattern is authorized
// against, in order: a fine-grained one first where upstream has one
// (KubeletFineGrainedAuthz: /pods and /runningpods -> pods, /healthz -> healthz,
// /configz -> configz), then the coarse one (stats, metrics, log, spec, checkpoint, or
// proxy for everything else). It reads the pattern, never a request path: a pattern is
// literal and clean, while a request path can be spelled so that a decoder, a path
// cleaner and the router each see a different endpoint in it.
func subresourcesFor(pattern string) []string {
	p := pattern
	if _, rest, found := strings.Cut(pattern, " "); found {
		p = rest
	}
	if i := strings.IndexByte(p, '/'); i > 0 { // a host in the pattern
		p = p[i:]
	}
	switch {
	case isSubpath(p, "/pods"), isSubpath(p, "/runningpods"):
		return []string{"pods", "proxy"}
	case isSubpath(p, "/healthz"):
		return []string{"healthz", "proxy"}
	case isSubpath(p, "/configz"):
		return []string{"configz", "proxy"}
	case isSubpath(p, "/stats"):
		return []string{"stats"}
	case isSubpath(p, "/metrics"):
		return []string{"metrics"}
	case isSubpath(p, "/logs"):
		return []string{"log"}
	case isSubpath(p, "/spec"):
		return []string{"spec"}
	case isSubpath(p, "/checkpoint"):
		return []string{"checkpoint"}
	}
	return []string{"proxy"}
}

// authorize asks authz about each subresource in turn and lets the request through on
// the first allowed one; otherwise it answers 403 (denied) or 500 (the authorizer
// failed) and returns false.
func (h *apiHandler) authorize(w http.ResponseWriter, r *http.Request, u *User, subresources []string) bool {
	a := Attributes{User: u, Verb: verbFor(r.Method), Resource: "nodes", Name: h.nodeName, Path: r.URL.EscapedPath()}
	var lastErr error
	for _, sub := range subresources {
		a.Subresource = sub
		allowed, _, err := h.authz.Authorize(r.Context(), a)
		if err != nil {
			lastErr = err
			continue
		}
		if allowed {
			return true
		}
	}
	if lastErr != nil {
		h.logf("Authorization error", "user", u.Name, "verb", a.Verb, "resource", a.Resource, "subresource", a.Subresource, "err", lastErr)
		http.Error(w, fmt.Sprintf("Authorization error (user=%s, verb=%s, resource=%s, subresource=%s)", u.Name, a.Verb, a.Resource, a.Subresource), http.StatusInternalServerError)
		return false
	}
	h.logf("Forbidden request", "user", u.Name, "verb", a.Verb, "subresource", a.Subresource, "path", a.Path)
	http.Error(w, fmt.Sprintf("Forbidden (user=%s, verb=%s, resource=%s, subresource=%s)", u.Name, a.Verb, a.Resource, a.Subresource), http.StatusForbidden)
	return false
}

// ---------------------------------------------------------------- cache

// ttlCache is a bounded expiring map. When full it evicts one entry: an expired one if
// there is any, else the least recently used. A burst of distinct credentials (random
// bearer tokens) then only pushes out entries not used since, never the whole cache,
// so callers in active use keep their cached answers.
type ttlCache[V any] struct {
	clock clock.PassiveClock
	max   int
	mu    sync.Mutex
	items map[string]*ttlEntry[V]
	lru   list.List     // of *ttlEntry[V], most recently used first
	exp   expiryHeap[V] // soonest expiry first
}

type ttlEntry[V any] struct {
	key     string
	v       V
	expires time.Time
	elem    *list.Element
	index   int // in exp
}

func newTTLCache[V any](clk clock.PassiveClock, size int) *ttlCache[V] {
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &ttlCache[V]{clock: clk, max: max(size, 1), items: map[string]*ttlEntry[V]{}}
}

func (c *ttlCache[V]) get(k string) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var zero V
	e, ok := c.items[k]
	if !ok {
		return zero, false
	}
	if !c.clock.Now().Before(e.expires) {
		c.remove(e)
		return zero, false
	}
	c.lru.MoveToFront(e.elem)
	return e.v, true
}

func (c *ttlCache[V]) set(k string, v V, ttl time.Duration) {
	if ttl <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.clock.Now()
	if e, ok := c.items[k]; ok {
		e.v, e.expires = v, now.Add(ttl)
		heap.Fix(&c.exp, e.index)
		c.lru.MoveToFront(e.elem)
		return
	}
	if len(c.items) >= c.max {
		victim := c.exp[0]
		if now.Before(victim.expires) {
			victim = c.lru.Back().Value.(*ttlEntry[V])
		}
		c.remove(victim)
	}
	e := &ttlEntry[V]{key: k, v: v, expires: now.Add(ttl)}
	e.elem = c.lru.PushFront(e)
	heap.Push(&c.exp, e)
	c.items[k] = e
}

func (c *ttlCache[V]) remove(e *ttlEntry[V]) {
	delete(c.items, e.key)
	c.lru.Remove(e.elem)
	heap.Remove(&c.exp, e.index)
}

// expiryHeap orders cache entries by expiry (container/heap).
type expiryHeap[V any] []*ttlEntry[V]

func (h expiryHeap[V]) Len() int           { return len(h) }
func (h expiryHeap[V]) Less(i, j int) bool { return h[i].expires.Before(h[j].expires) }
func (h expiryHeap[V]) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *expiryHeap[V]) Push(x any) {
	e := x.(*ttlEntry[V])
	e.index = len(*h)
	*h = append(*h, e)
}
func (h *expiryHeap[V]) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return e
}
