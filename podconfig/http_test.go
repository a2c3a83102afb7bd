package podconfig

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/podutil"
	"github.com/nodelet/nodelet/internal/testsupport/eventually"
)

// podServer serves whatever body and status the test sets, and records the requests.
type podServer struct {
	mu       sync.Mutex
	status   int
	body     string
	requests []http.Header
}

func (s *podServer) set(status int, body string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.status, s.body = status, body
}

func (s *podServer) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.requests)
}

func (s *podServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests = append(s.requests, r.Header.Clone())
	w.WriteHeader(s.status)
	_, _ = w.Write([]byte(s.body))
}

const jsonPod = `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web","labels":{"app":"web"}},
"spec":{"containers":[{"name":"nginx","image":"nginx:1.27"}]}}`

// noUpdate fails if an update is waiting. Sources send before their check returns, so
// after a synchronous check an empty channel means nothing was sent.
func noUpdate(t *testing.T, c *Config) {
	t.Helper()
	select {
	case u := <-c.Updates():
		t.Fatalf("unexpected update %s of %d pods", u.Op, len(u.Pods))
	default:
	}
}

func newHTTPTest(t *testing.T, status int, body string) (*podServer, *httptest.Server, *Config, *httpSource) {
	t.Helper()
	ps := &podServer{status: status, body: body}
	srv := httptest.NewServer(ps)
	t.Cleanup(srv.Close)
	c := New(testNode, clocktesting.NewFakeClock(time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)), WithSources(podutil.SourceHTTP))
	s := &httpSource{url: srv.URL + "/pods", header: HTTPHeader(map[string][]string{
		"authorization": {"Bearer s3cret"},
		"X-Multi":       {"a", "b"},
	}), client: srv.Client()}
	return ps, srv, c, s
}

func TestHTTPSource(t *testing.T) {
	ctx := context.Background()

	t.Run("single pod, defaulted and named as a static pod, headers sent", func(t *testing.T) {
		ps, _, c, s := newHTTPTest(t, http.StatusOK, jsonPod)
		if c.SourcesReady() {
			t.Fatal("ready before the first GET")
		}
		c.checkHTTPSource(ctx, s)
		u := next(t, c)
		if u.Op != OpAdd || u.Source != podutil.SourceHTTP || len(u.Pods) != 1 {
			t.Fatalf("got %s from %s with %d pods, want Add of one pod from http", u.Op, u.Source, len(u.Pods))
		}
		p := u.Pods[0]
		checks := []struct {
			name      string
			got, want any
		}{
			{"name", p.Name, "web-" + testNode},
			{"namespace", p.Namespace, "default"},
			{"nodeName", p.Spec.NodeName, testNode},
			{"source", p.Annotations[podutil.AnnotationConfigSource], podutil.SourceHTTP},
			{"hash", p.Annotations[podutil.AnnotationConfigHash], string(p.UID)},
			{"seen", p.Annotations[podutil.AnnotationConfigSeen], "2026-12-05T12:00:00Z"},
			{"phase", p.Status.Phase, v1.PodPending},
			{"restartPolicy", p.Spec.RestartPolicy, v1.RestartPolicyAlways},
			{"pull policy", p.Spec.Containers[0].ImagePullPolicy, v1.PullIfNotPresent},
			// Upstream adds the NoExecute toleration to file pods only.
			{"tolerations", len(p.Spec.Tolerations), 0},
			{"static", podutil.IsStaticPod(p), true},
			{"ready", c.SourcesReady(), true},
		}
		for _, ch := range checks {
			if ch.got != ch.want {
				t.Errorf("%s = %v, want %v", ch.name, ch.got, ch.want)
			}
		}
		if len(p.UID) != 32 {
			t.Errorf("UID %q is not an md5 hex", p.UID)
		}
		h := ps.requests[0]
		if h.Get("Authorization") != "Bearer s3cret" || strings.Join(h.Values("X-Multi"), ",") != "a,b" {
			t.Errorf("request headers = %v, want Authorization and both X-Multi values", h)
		}

		// The same body again: nothing.
		c.checkHTTPSource(ctx, s)
		noUpdate(t, c)
		if ps.count() != 2 {
			t.Errorf("%d GETs, want 2", ps.count())
		}

		// The same pod from another URL, or from a file, is another pod (another UID).
		other := &httpSource{url: s.url + "?other", header: s.header, client: s.client}
		c2 := New(testNode, clocktesting.NewFakeClock(time.Now()))
		c2.checkHTTPSource(ctx, other)
		if u2 := next(t, c2); u2.Pods[0].UID == p.UID {
			t.Errorf("the same body from two URLs gave one UID %s", p.UID)
		}
		file, err := decodeOne([]byte(jsonPod), s.url, testNode)
		if err != nil || file.UID == p.UID {
			t.Errorf("a file pod with the same bytes has UID %s (err %v), want one other than %s", file.UID, err, p.UID)
		}
	})

	t.Run("pod list in YAML, a change is a new pod", func(t *testing.T) {
		ps, _, c, s := newHTTPTest(t, http.StatusOK, podList)
		c.checkHTTPSource(ctx, s)
		u := next(t, c)
		if got := podNames(u.Pods); u.Op != OpAdd || len(got) != 2 || got[0] != "one-"+testNode || got[1] != "two-"+testNode {
			t.Fatalf("got %s of %v, want Add of one and two", u.Op, got)
		}
		if u.Pods[1].Namespace != "kube-system" {
			t.Errorf("two's namespace = %q", u.Pods[1].Namespace)
		}
		one, two := u.Pods[0], u.Pods[1]

		ps.set(http.StatusOK, strings.Replace(podList, "namespace: kube-system", "namespace: kube-system\n    labels: {edited: \"yes\"}", 1))
		c.checkHTTPSource(ctx, s)
		rm, add := next(t, c), next(t, c)
		if rm.Op != OpRemove || len(rm.Pods) != 1 || rm.Pods[0].UID != two.UID {
			t.Errorf("got %s of %v, want Remove of the old two", rm.Op, podNames(rm.Pods))
		}
		if add.Op != OpAdd || len(add.Pods) != 1 || add.Pods[0].Labels["edited"] != "yes" || add.Pods[0].UID == one.UID {
			t.Errorf("got %s of %v, want Add of the edited two", add.Op, podNames(add.Pods))
		}
		noUpdate(t, c)
	})

	t.Run("errors keep the pods and are logged", func(t *testing.T) {
		logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
		lctx := klog.NewContext(ctx, logger)
		ps, srv, c, s := newHTTPTest(t, http.StatusOK, jsonPod)
		c.checkHTTPSource(lctx, s)
		first := next(t, c).Pods[0]

		for _, tc := range []struct {
			name, body, log string
			status          int
		}{
			{"a status other than 200", jsonPod + " ", "500 Internal Server Error", http.StatusInternalServerError},
			{"not found", "", "404 Not Found", http.StatusNotFound},
			{"a body that does not decode", "{not json", "decoding the static pods", http.StatusOK},
			{"an invalid pod", `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"x"},"spec":{}}`, "spec.containers is empty", http.StatusOK},
			{"another kind", `{"apiVersion":"v1","kind":"Service","metadata":{"name":"x"}}`, `kind is \"Service\"`, http.StatusOK},
		} {
			ps.set(tc.status, tc.body)
			c.checkHTTPSource(lctx, s)
			noUpdate(t, c)
			if logs := logger.GetSink().(ktesting.Underlier).GetBuffer().String(); !strings.Contains(logs, tc.log) {
				t.Errorf("%s: the log does not say %q:\n%s", tc.name, tc.log, logs)
			}
		}
		if c.sources[podutil.SourceHTTP].pods[first.UID] == nil {
			t.Fatal("the errors removed the pod")
		}
		// The good body again brings nothing new: the pod never left.
		ps.set(http.StatusOK, jsonPod)
		c.checkHTTPSource(lctx, s)
		noUpdate(t, c)
		if s.failures != 0 {
			t.Errorf("failures = %d after a good GET, want 0", s.failures)
		}

		// The server gone: the pod stays.
		srv.Close()
		c.checkHTTPSource(lctx, s)
		noUpdate(t, c)
		if s.failures != 1 || c.sources[podutil.SourceHTTP].pods[first.UID] == nil {
			t.Errorf("failures = %d, pod kept = %v; want 1 and the pod kept", s.failures, c.sources[podutil.SourceHTTP].pods[first.UID] != nil)
		}
	})

	t.Run("not ready until a GET succeeds", func(t *testing.T) {
		ps, _, c, s := newHTTPTest(t, http.StatusServiceUnavailable, "")
		c.checkHTTPSource(ctx, s)
		if c.SourcesReady() {
			t.Fatal("ready after a failed GET")
		}
		ps.set(http.StatusOK, jsonPod)
		c.checkHTTPSource(ctx, s)
		if u := next(t, c); u.Op != OpAdd || !c.SourcesReady() {
			t.Fatalf("got %s, ready %v; want Add and ready", u.Op, c.SourcesReady())
		}
	})

	t.Run("an empty body is no pods", func(t *testing.T) {
		ps, _, c, s := newHTTPTest(t, http.StatusOK, "")
		c.checkHTTPSource(ctx, s)
		noUpdate(t, c)
		if !c.SourcesReady() {
			t.Fatal("an empty body must make the source ready, as upstream")
		}
		ps.set(http.StatusOK, jsonPod)
		c.checkHTTPSource(ctx, s)
		add := next(t, c)
		ps.set(http.StatusOK, "")
		c.checkHTTPSource(ctx, s)
		if u := next(t, c); u.Op != OpRemove || u.Pods[0].UID != add.Pods[0].UID {
			t.Fatalf("got %s, want Remove of the pod", u.Op)
		}
		// Serving the same pod again brings it back.
		ps.set(http.StatusOK, jsonPod)
		c.checkHTTPSource(ctx, s)
		if u := next(t, c); u.Op != OpAdd || u.Pods[0].UID != add.Pods[0].UID {
			t.Fatalf("got %s, want Add of the pod again", u.Op)
		}
	})

	t.Run("a change is picked up at the next check", func(t *testing.T) {
		ps := &podServer{status: http.StatusOK, body: jsonPod}
		srv := httptest.NewServer(ps)
		defer srv.Close()
		clk := clocktesting.NewFakeClock(time.Now())
		c := New(testNode, clk, WithSources(podutil.SourceHTTP))
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			c.RunHTTPSource(rctx, srv.URL, HTTPHeader(map[string][]string{"X-Token": {"t"}}), 30*time.Second)
		}()
		defer func() { cancel(); <-done }()

		// The first GET is made at once.
		first := next(t, c)
		if first.Op != OpAdd || len(first.Pods) != 1 {
			t.Fatalf("got %s of %d pods, want Add of the pod", first.Op, len(first.Pods))
		}
		ps.set(http.StatusOK, strings.Replace(jsonPod, `"app":"web"`, `"app":"web2"`, 1))
		eventually.True(t, "the HTTP source's timer", clk.HasWaiters)
		clk.Step(29 * time.Second)
		if ps.count() != 1 {
			t.Fatalf("%d GETs before the period passed, want 1", ps.count())
		}
		clk.Step(time.Second)
		rm, add := next(t, c), next(t, c)
		if rm.Op != OpRemove || add.Op != OpAdd || add.Pods[0].Labels["app"] != "web2" {
			t.Fatalf("got %s then %s, want Remove then Add of the changed pod", rm.Op, add.Op)
		}
		if ps.requests[1].Get("X-Token") != "t" {
			t.Errorf("the second GET's headers = %v", ps.requests[1])
		}
	})
}

// TestHTTPSourceHeaderStaysOnItsOrigin: staticPodURLHeader goes with a redirect
// to the same origin, never with one to another host (two test servers: the
// same address, another port), whatever the header's name.
func TestHTTPSourceHeaderStaysOnItsOrigin(t *testing.T) {
	other := &podServer{status: http.StatusOK, body: jsonPod}
	otherSrv := httptest.NewServer(other)
	t.Cleanup(otherSrv.Close)
	origin := &podServer{status: http.StatusOK, body: jsonPod}
	mux := http.NewServeMux()
	mux.HandleFunc("/cross", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, otherSrv.URL+"/pods", http.StatusFound)
	})
	mux.HandleFunc("/same", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/pods", http.StatusFound)
	})
	mux.Handle("/pods", origin)
	originSrv := httptest.NewServer(mux)
	t.Cleanup(originSrv.Close)
	header := HTTPHeader(map[string][]string{"X-Api-Key": {"s3cret"}, "X-Multi": {"a", "b"}})

	for _, tc := range []struct {
		path   string
		server *podServer
		sent   bool
	}{
		{"/same", origin, true},
		{"/cross", other, false},
	} {
		s := newHTTPSource(originSrv.URL+tc.path, header)
		if _, err := s.fetch(context.Background()); err != nil {
			t.Fatalf("GET %s: %v", tc.path, err)
		}
		if tc.server.count() != 1 {
			t.Fatalf("GET %s: %d requests reached the redirect's target, want 1", tc.path, tc.server.count())
		}
		h := tc.server.requests[0]
		got := h.Get("X-Api-Key") == "s3cret" && strings.Join(h.Values("X-Multi"), ",") == "a,b"
		leaked := h.Get("X-Api-Key") != "" || len(h.Values("X-Multi")) > 0
		if tc.sent && !got {
			t.Errorf("GET %s: the same-origin redirect lost the header: %v", tc.path, h)
		}
		if !tc.sent && leaked {
			t.Errorf("GET %s: the header went to another host: %v", tc.path, h)
		}
	}
}

func TestSameOrigin(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		same bool
	}{
		{"http://h/x", "http://h/y", true},
		{"http://h/x", "http://H:80/y", true},
		{"https://h/x", "https://h:443/y", true},
		{"http://h/x", "https://h/x", false},
		{"http://h:8080/x", "http://h:8081/x", false},
		{"http://h/x", "http://h.evil/x", false},
		{"http://127.0.0.1/x", "http://localhost/x", false},
	} {
		a, _ := url.Parse(tc.a)
		b, _ := url.Parse(tc.b)
		if got := sameOrigin(a, b); got != tc.same {
			t.Errorf("sameOrigin(%s, %s) = %v, want %v", tc.a, tc.b, got, tc.same)
		}
	}
}

// TestHTTPSourceRedirectLimit: the client's own redirect policy keeps Go's limit.
func TestHTTPSourceRedirectLimit(t *testing.T) {
	var n int
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		n++
		mu.Unlock()
		http.Redirect(w, r, "/again", http.StatusFound)
	}))
	t.Cleanup(srv.Close)
	if _, err := newHTTPSource(srv.URL, http.Header{}).fetch(context.Background()); err == nil || !strings.Contains(err.Error(), "redirects") {
		t.Fatalf("endless redirects: err = %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if n != maxHTTPRedirects {
		t.Errorf("%d requests, want %d", n, maxHTTPRedirects)
	}
}
