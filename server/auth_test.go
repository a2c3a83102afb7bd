package server

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
)

func TestSubresourcesFor(t *testing.T) {
	tests := []struct {
		pattern string
		subs    []string
	}{
		{"GET /stats/summary", []string{"stats"}},
		{"/stats/", []string{"stats"}},
		{"GET /statsfoo", []string{"proxy"}},
		{"GET /metrics", []string{"metrics"}},
		{"GET /metrics/resource", []string{"metrics"}},
		{"GET /metrics/cadvisor", []string{"metrics"}},
		{"GET /logs/", []string{"log"}},
		{"GET /logs/{path...}", []string{"log"}},
		{"GET /spec/", []string{"spec"}},
		{"POST /checkpoint/{ns}/{pod}/{container}", []string{"checkpoint"}},
		{"GET /pods", []string{"pods", "proxy"}},
		{"GET /pods/", []string{"pods", "proxy"}},
		{"GET /runningpods/", []string{"pods", "proxy"}},
		{"/healthz", []string{"healthz", "proxy"}},
		{"/healthz/", []string{"healthz", "proxy"}},
		{"GET /configz", []string{"configz", "proxy"}},
		{"POST /exec/{ns}/{pod}/{container}", []string{"proxy"}},
		{"GET /containerLogs/{ns}/{pod}/{container}", []string{"proxy"}},
		{"POST /run/{ns}/{pod}/{uid}/{container}", []string{"proxy"}},
		{"GET /debug/pprof/", []string{"proxy"}},
		{"GET node-1/metrics", []string{"metrics"}},
		{"/", []string{"proxy"}},
	}
	for _, tc := range tests {
		if got := subresourcesFor(tc.pattern); !slices.Equal(got, tc.subs) {
			t.Errorf("subresourcesFor(%q) = %v, want %v", tc.pattern, got, tc.subs)
		}
	}
	for method, verb := range map[string]string{"GET": "get", "POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete", "HEAD": "", "CONNECT": ""} {
		if got := verbFor(method); got != verb {
			t.Errorf("verbFor(%s) = %q, want %q", method, got, verb)
		}
	}
}

type fakeTokenReviewer struct {
	calls  atomic.Int32
	tokens map[string]authenticationv1.UserInfo
	err    error
}

func (f *fakeTokenReviewer) Create(_ context.Context, tr *authenticationv1.TokenReview, _ metav1.CreateOptions) (*authenticationv1.TokenReview, error) {
	f.calls.Add(1)
	if f.err != nil {
		return nil, f.err
	}
	out := tr.DeepCopy()
	if u, ok := f.tokens[tr.Spec.Token]; ok {
		out.Status = authenticationv1.TokenReviewStatus{Authenticated: true, User: u}
	}
	return out, nil
}

type fakeSAR struct {
	calls atomic.Int32
	allow func(authorizationv1.SubjectAccessReviewSpec) bool
	err   error
}

func (f *fakeSAR) Create(_ context.Context, sar *authorizationv1.SubjectAccessReview, _ metav1.CreateOptions) (*authorizationv1.SubjectAccessReview, error) {
	f.calls.Add(1)
	if f.err != nil {
		return nil, f.err
	}
	out := sar.DeepCopy()
	out.Status.Allowed = f.allow(sar.Spec)
	return out, nil
}

func TestTokenAuthenticatorCaches(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	rev := &fakeTokenReviewer{tokens: map[string]authenticationv1.UserInfo{"good": {Username: "sa", Groups: []string{"g"}}}}
	a := NewTokenAuthenticator(rev, 2*time.Minute, clk)
	req := func(tok string) *http.Request {
		r := httptest.NewRequest("GET", "/pods", nil)
		r.Header.Set("Authorization", "Bearer "+tok)
		return r
	}
	u, ok, err := a.Authenticate(req("good"))
	if err != nil || !ok || u.Name != "sa" || u.Groups[0] != "g" {
		t.Fatalf("good token: %+v %v %v", u, ok, err)
	}
	if _, ok, err := a.Authenticate(req("bad")); ok || err == nil {
		t.Fatalf("bad token: ok=%v err=%v, want an error", ok, err)
	}
	_, _, _ = a.Authenticate(req("good"))
	_, _, _ = a.Authenticate(req("bad"))
	if n := rev.calls.Load(); n != 2 {
		t.Errorf("TokenReviews within the TTL = %d, want 2 (both outcomes cached)", n)
	}
	clk.Step(2*time.Minute + time.Second)
	_, _, _ = a.Authenticate(req("good"))
	if n := rev.calls.Load(); n != 3 {
		t.Errorf("TokenReviews after the TTL = %d, want 3", n)
	}
	// No bearer token: not this authenticator's business.
	if _, ok, err := a.Authenticate(httptest.NewRequest("GET", "/", nil)); ok || err != nil {
		t.Errorf("no token: ok=%v err=%v", ok, err)
	}
	rev.err = errors.New("apiserver down")
	if _, ok, err := a.Authenticate(req("other")); ok || err == nil {
		t.Errorf("review failure: ok=%v err=%v, want an error", ok, err)
	}
}

func TestWebhookAuthorizerCachesByOutcome(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	sar := &fakeSAR{allow: func(s authorizationv1.SubjectAccessReviewSpec) bool {
		return s.User == "admin" && s.ResourceAttributes.Resource == "nodes" && s.ResourceAttributes.Name == "n"
	}}
	az := NewWebhookAuthorizer(sar, 5*time.Minute, 30*time.Second, clk)
	ctx := context.Background()
	admin := Attributes{User: &User{Name: "admin"}, Verb: "get", Resource: "nodes", Subresource: "proxy", Name: "n"}
	bob := admin
	bob.User = &User{Name: "bob"}
	for i := 0; i < 3; i++ {
		if ok, _, err := az.Authorize(ctx, admin); !ok || err != nil {
			t.Fatalf("admin: %v %v", ok, err)
		}
		if ok, _, err := az.Authorize(ctx, bob); ok || err != nil {
			t.Fatalf("bob: %v %v", ok, err)
		}
	}
	if n := sar.calls.Load(); n != 2 {
		t.Fatalf("SARs = %d, want 2", n)
	}
	clk.Step(31 * time.Second) // the denial expires, the allowance does not
	_, _, _ = az.Authorize(ctx, admin)
	_, _, _ = az.Authorize(ctx, bob)
	if n := sar.calls.Load(); n != 3 {
		t.Fatalf("SARs after 31s = %d, want 3", n)
	}
	clk.Step(5 * time.Minute)
	_, _, _ = az.Authorize(ctx, admin)
	if n := sar.calls.Load(); n != 4 {
		t.Fatalf("SARs after 5m = %d, want 4", n)
	}
}

// testCA makes a CA and a client certificate it signed.
func testCA(t *testing.T, cn string, orgs ...string) (*x509.CertPool, *x509.Certificate) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "ca"}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: cn, Organization: orgs}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, KeyUsage: x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return pool, c
}

func TestAuthFilter(t *testing.T) {
	pool, adminCert := testCA(t, "kube-apiserver-kubelet-client", "system:masters")
	_, foreignCert := testCA(t, "mallory")
	rev := &fakeTokenReviewer{tokens: map[string]authenticationv1.UserInfo{
		"viewer": {Username: "system:serviceaccount:ns:viewer"},
		"prom":   {Username: "prom"},
	}}
	sar := &fakeSAR{allow: func(s authorizationv1.SubjectAccessReviewSpec) bool {
		for _, g := range s.Groups {
			if g == "system:masters" {
				return true
			}
		}
		return s.User == "prom" && s.ResourceAttributes.Subresource == "metrics" && s.ResourceAttributes.Verb == "get"
	}}
	clk := clocktesting.NewFakeClock(time.Now())
	tests := []struct {
		name      string
		anonymous bool
		sarErr    error
		method    string
		path      string
		cert      *x509.Certificate
		token     string
		want      int
		body      string
	}{
		{name: "no credentials", path: "/pods", want: 401, body: "Unauthorized"},
		{name: "no credentials, anonymous on, denied", anonymous: true, path: "/pods", want: 403,
			body: "Forbidden (user=system:anonymous, verb=get, resource=nodes, subresource=proxy)"},
		{name: "bad token, anonymous on", anonymous: true, path: "/pods", token: "nope", want: 401},
		{name: "foreign client cert", path: "/pods", cert: foreignCert, want: 401},
		{name: "admin cert", path: "/pods", cert: adminCert, want: 200},
		{name: "admin cert exec", method: "POST", path: "/exec/ns/p/c", cert: adminCert, want: 200},
		{name: "token without rights", path: "/pods", token: "viewer", want: 403,
			body: "Forbidden (user=system:serviceaccount:ns:viewer, verb=get, resource=nodes, subresource=proxy)"},
		{name: "metrics reader on metrics", path: "/metrics", token: "prom", want: 200},
		{name: "metrics reader on exec", method: "POST", path: "/exec/ns/p/c", token: "prom", want: 403,
			body: "Forbidden (user=prom, verb=create, resource=nodes, subresource=proxy)"},
		{name: "metrics reader on an encoded escape to pods", path: "/pods/%2E%2E/metrics", token: "prom", want: 403,
			body: "Forbidden (user=prom, verb=get, resource=nodes, subresource=proxy)"},
		{name: "metrics reader on a path no route serves", path: "/metrics/..%2Fpods", token: "prom", want: 403,
			body: "Forbidden (user=prom, verb=get, resource=nodes, subresource=proxy)"},
		{name: "admin on a path the mux would redirect", path: "/metrics/../pods", cert: adminCert, want: 404},
		{name: "admin on a method no route serves", method: "DELETE", path: "/pods", cert: adminCert, want: 404},
		{name: "authorizer failure", path: "/pods", cert: adminCert, sarErr: errors.New("boom"), want: 500,
			body: "Authorization error (user=kube-apiserver-kubelet-client, verb=get, resource=nodes, subresource=proxy)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sar.err = tc.sarErr
			var reached atomic.Int32
			next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { reached.Add(1) })
			routes := []route{{"GET /pods", next}, {"POST /exec/{ns}/{pod}/{container}", next}, {"GET /metrics", next}}
			authn := &UnionAuthenticator{Anonymous: tc.anonymous, Authenticators: []Authenticator{
				&X509Authenticator{Roots: pool}, NewTokenAuthenticator(rev, time.Minute, clk)}}
			h := newAPIHandler(routes, "node-1", authn, NewWebhookAuthorizer(sar, time.Minute, time.Second, clk), func(string, ...any) {})
			method := tc.method
			if method == "" {
				method = "GET"
			}
			r := httptest.NewRequest(method, "https://node-1:10250"+tc.path, nil)
			if tc.cert != nil {
				r.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{tc.cert}}
			}
			if tc.token != "" {
				r.Header.Set("Authorization", "Bearer "+tc.token)
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != tc.want {
				t.Fatalf("status = %d (%s), want %d", w.Code, w.Body.String(), tc.want)
			}
			if tc.body != "" && strings.TrimSpace(w.Body.String()) != tc.body {
				t.Errorf("body = %q, want %q", w.Body.String(), tc.body)
			}
			wantReached := int32(0)
			if tc.want == 200 {
				wantReached = 1
			}
			if n := reached.Load(); n != wantReached {
				t.Errorf("handler reached %d times, want %d", n, wantReached)
			}
		})
	}
}

func TestUnionAddsAuthenticatedGroup(t *testing.T) {
	pool, c := testCA(t, "system:node:n", "system:nodes")
	u := &UnionAuthenticator{Authenticators: []Authenticator{&X509Authenticator{Roots: pool}}}
	r := httptest.NewRequest("GET", "/", nil)
	r.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{c}}
	user, ok, err := u.Authenticate(r)
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	if user.Name != "system:node:n" || strings.Join(user.Groups, ",") != "system:nodes,system:authenticated" {
		t.Errorf("user = %+v", user)
	}
}

// TestUnionLeavesTheCachedUserAlone: the token cache hands one *User to every
// request with the same token, so the union must add system:authenticated to a
// copy. Sequentially, the cached user keeps the groups the TokenReview gave;
// concurrently (run with -race), no request writes what another reads.
func TestUnionLeavesTheCachedUserAlone(t *testing.T) {
	rev := &fakeTokenReviewer{tokens: map[string]authenticationv1.UserInfo{"good": {Username: "sa", Groups: []string{"g"}}}}
	tokens := NewTokenAuthenticator(rev, time.Hour, clocktesting.NewFakeClock(time.Now()))
	union := &UnionAuthenticator{Authenticators: []Authenticator{tokens}}
	req := func() *http.Request {
		r := httptest.NewRequest("GET", "/pods", nil)
		r.Header.Set("Authorization", "Bearer good")
		return r
	}
	cached, ok, err := tokens.Authenticate(req()) // fills the cache
	if err != nil || !ok {
		t.Fatal(ok, err)
	}

	var wg sync.WaitGroup
	start := make(chan struct{})
	errs := make(chan error, 8)
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			u, ok, err := union.Authenticate(req())
			if err != nil || !ok || strings.Join(u.Groups, ",") != "g,system:authenticated" {
				errs <- fmt.Errorf("union: %+v %v %v", u, ok, err)
			}
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	again, _, _ := tokens.Authenticate(req())
	if again != cached || strings.Join(cached.Groups, ",") != "g" {
		t.Errorf("cached user groups = %q, want [g] (the TokenReview's, unchanged)", cached.Groups)
	}
	if n := rev.calls.Load(); n != 1 {
		t.Errorf("TokenReviews = %d, want 1 (every request served from the cache)", n)
	}
}

// TestWebhookAuthorizerCacheKeyIsUnambiguous: a cached answer for one identity must
// never be served to another whose groups or extra values join to the same text.
func TestWebhookAuthorizerCacheKeyIsUnambiguous(t *testing.T) {
	sar := &fakeSAR{allow: func(s authorizationv1.SubjectAccessReviewSpec) bool {
		return slices.Equal(s.Groups, []string{"a", "b"}) || slices.Equal(s.Extra["scopes"], authorizationv1.ExtraValue{"x", "y"})
	}}
	az := NewWebhookAuthorizer(sar, 5*time.Minute, 30*time.Second, clocktesting.NewFakeClock(time.Now()))
	ask := func(u *User) bool {
		ok, _, err := az.Authorize(context.Background(), Attributes{User: u, Verb: "get", Resource: "nodes", Subresource: "proxy", Name: "n"})
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	pairs := []struct{ allowed, other *User }{
		{&User{Name: "u", Groups: []string{"a", "b"}}, &User{Name: "u", Groups: []string{"a,b"}}},
		{&User{Name: "u", Extra: map[string][]string{"scopes": {"x", "y"}}}, &User{Name: "u", Extra: map[string][]string{"scopes": {"x,y"}}}},
	}
	for _, p := range pairs {
		if !ask(p.allowed) {
			t.Fatalf("%+v denied", p.allowed)
		}
		if ask(p.other) {
			t.Errorf("%+v was allowed from the cache entry of %+v", p.other, p.allowed)
		}
	}
	if n := sar.calls.Load(); n != 4 {
		t.Errorf("SubjectAccessReviews = %d, want 4 (one per identity)", n)
	}
}

func TestSARKeyDistinguishesFields(t *testing.T) {
	spec := func(mod func(*authorizationv1.SubjectAccessReviewSpec)) authorizationv1.SubjectAccessReviewSpec {
		s := authorizationv1.SubjectAccessReviewSpec{User: "u", ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "get", Resource: "nodes", Name: "n"}}
		mod(&s)
		return s
	}
	specs := []authorizationv1.SubjectAccessReviewSpec{
		spec(func(s *authorizationv1.SubjectAccessReviewSpec) {}),
		spec(func(s *authorizationv1.SubjectAccessReviewSpec) { s.Groups = []string{"a", "b"} }),
		spec(func(s *authorizationv1.SubjectAccessReviewSpec) { s.Groups = []string{"a,b"} }),
		spec(func(s *authorizationv1.SubjectAccessReviewSpec) { s.Groups = []string{"ab"} }),
		spec(func(s *authorizationv1.SubjectAccessReviewSpec) { s.Groups = []string{"a", "b", ""} }),
		spec(func(s *authorizationv1.SubjectAccessReviewSpec) { s.Groups = []string{"1:a"} }),
		spec(func(s *authorizationv1.SubjectAccessReviewSpec) { s.User, s.UID = "u1", "" }),
		spec(func(s *authorizationv1.SubjectAccessReviewSpec) { s.User, s.UID = "u", "1" }),
		spec(func(s *authorizationv1.SubjectAccessReviewSpec) {
			s.Extra = map[string]authorizationv1.ExtraValue{"k": {"a", "b"}}
		}),
		spec(func(s *authorizationv1.SubjectAccessReviewSpec) {
			s.Extra = map[string]authorizationv1.ExtraValue{"k": {"a,b"}}
		}),
		spec(func(s *authorizationv1.SubjectAccessReviewSpec) {
			s.Extra = map[string]authorizationv1.ExtraValue{"k=a": {"b"}}
		}),
		spec(func(s *authorizationv1.SubjectAccessReviewSpec) {
			s.Extra = map[string]authorizationv1.ExtraValue{"k": {"a"}, "l": nil}
		}),
		spec(func(s *authorizationv1.SubjectAccessReviewSpec) { s.ResourceAttributes.Subresource = "proxy" }),
		spec(func(s *authorizationv1.SubjectAccessReviewSpec) { s.ResourceAttributes.Name = "n\xff" }),
		spec(func(s *authorizationv1.SubjectAccessReviewSpec) { s.ResourceAttributes.Name = "n\xfe" }),
	}
	seen := map[string]int{}
	for i, s := range specs {
		k := sarKey(s)
		if j, dup := seen[k]; dup {
			t.Errorf("specs %d and %d share the cache key %q", j, i, k)
		}
		seen[k] = i
	}
	// The same review in another map order has the same key.
	a := spec(func(s *authorizationv1.SubjectAccessReviewSpec) {
		s.Extra = map[string]authorizationv1.ExtraValue{"k": {"1"}, "l": {"2"}}
	})
	b := spec(func(s *authorizationv1.SubjectAccessReviewSpec) {
		s.Extra = map[string]authorizationv1.ExtraValue{"l": {"2"}, "k": {"1"}}
	})
	if sarKey(a) != sarKey(b) {
		t.Error("the key depends on map order")
	}
}

func TestTTLCacheEvictsOneEntryAtATime(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	c := newTTLCache[int](clk, 3)
	hits := func(keys ...string) []string {
		var out []string
		for _, k := range keys {
			if _, ok := c.get(k); ok {
				out = append(out, k)
			}
		}
		return out
	}
	c.set("a", 1, time.Minute)
	c.set("b", 2, time.Minute)
	c.set("c", 3, time.Minute)
	hits("a") // b is now the least recently used
	c.set("d", 4, time.Minute)
	if got := hits("a", "b", "c", "d"); !slices.Equal(got, []string{"a", "c", "d"}) {
		t.Fatalf("full, nothing expired: cached %v, want [a c d] (only the least recently used b evicted)", got)
	}
	// An expired entry goes first, even when it is not the least recently used.
	c = newTTLCache[int](clk, 3)
	c.set("x", 1, time.Minute)
	c.set("y", 2, 10*time.Second)
	c.set("z", 3, time.Minute)
	hits("x", "y") // z is the least recently used, y expires first
	clk.Step(11 * time.Second)
	c.set("w", 4, time.Minute)
	if got := hits("x", "y", "z", "w"); !slices.Equal(got, []string{"x", "z", "w"}) {
		t.Fatalf("with y expired: cached %v, want [x z w]", got)
	}
	if n := len(c.items); n != 3 || c.lru.Len() != 3 || len(c.exp) != 3 {
		t.Errorf("sizes: items %d lru %d heap %d, want 3", n, c.lru.Len(), len(c.exp))
	}
	// Updating a key keeps one entry with the new value and expiry.
	c.set("z", 30, time.Hour)
	clk.Step(2 * time.Minute)
	if v, ok := c.get("z"); !ok || v != 30 {
		t.Errorf("z = %d, %v after its update, want 30", v, ok)
	}
	if got := hits("x", "w"); len(got) != 0 {
		t.Errorf("expired entries still served: %v", got)
	}
}

// TestTokenAuthenticatorSurvivesRandomTokenFlood: random bearer tokens fill the cache
// with denials, but a token in use keeps its cached review.
func TestTokenAuthenticatorSurvivesRandomTokenFlood(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	rev := &fakeTokenReviewer{tokens: map[string]authenticationv1.UserInfo{"good": {Username: "sa"}}}
	a := NewTokenAuthenticator(rev, 2*time.Minute, clk)
	req := func(tok string) *http.Request {
		r := httptest.NewRequest("GET", "/pods", nil)
		r.Header.Set("Authorization", "Bearer "+tok)
		return r
	}
	const flood = 10000
	for i := 0; i < flood; i++ {
		if i%500 == 0 {
			if _, ok, err := a.Authenticate(req("good")); !ok || err != nil {
				t.Fatalf("good token: %v %v", ok, err)
			}
		}
		if _, ok, _ := a.Authenticate(req(fmt.Sprintf("random-%d", i))); ok {
			t.Fatal("a random token authenticated")
		}
	}
	if n := rev.calls.Load(); n != flood+1 {
		t.Errorf("TokenReviews = %d, want %d (one per random token, one for the token in use)", n, flood+1)
	}
}
