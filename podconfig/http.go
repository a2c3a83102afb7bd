package podconfig

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/internal/podutil"
)

// DefaultHTTPCheckFrequency is upstream's httpCheckFrequency default.
const DefaultHTTPCheckFrequency = 20 * time.Second

// httpFetchTimeout bounds one GET of staticPodURL, as upstream's client timeout: a
// hung server costs one check, not the source.
const httpFetchTimeout = 10 * time.Second

// httpFailureLogs is how many failures in a row are logged at the default level
// before further ones drop to V(4), as upstream: a URL that is down for hours does not
// flood the log.
const httpFailureLogs = 3

// HTTPHeader turns staticPodURLHeader into the request's header, every value of every
// key added in order (keys canonicalised), as upstream.
func HTTPHeader(m map[string][]string) http.Header {
	h := http.Header{}
	for k, vs := range m {
		for _, v := range vs {
			h.Add(k, v)
		}
	}
	return h
}

// RunHTTPSource reads static pods from url (staticPodURL) with header
// (staticPodURLHeader) now and every period (httpCheckFrequency), until ctx is done.
// The body is a v1 Pod or a v1 PodList, in JSON or YAML. It blocks; run it in its own
// goroutine.
//
// As upstream: an unchanged body sends nothing; a failed GET, a status other than
// 200 OK or a body that does not decode keeps the pods the source had (the source is
// not ready until a GET succeeds); an empty body is a source with no pods (and is
// logged as an error).
func (c *Config) RunHTTPSource(ctx context.Context, url string, header http.Header, period time.Duration) {
	if period <= 0 {
		period = DefaultHTTPCheckFrequency
	}
	c.registerSource(podutil.SourceHTTP)
	s := newHTTPSource(url, header)
	klog.FromContext(ctx).V(1).Info("Watching URL for static pods", "url", url)
	c.poll(ctx, period, func() { c.checkHTTPSource(ctx, s) })
}

// maxHTTPRedirects is Go's default limit, which a CheckRedirect of one's own must keep.
const maxHTTPRedirects = 10

func newHTTPSource(target string, header http.Header) *httpSource {
	client := &http.Client{Timeout: httpFetchTimeout, CheckRedirect: dropHeaderOffOrigin(header)}
	return &httpSource{url: target, header: header, client: client}
}

// dropHeaderOffOrigin is the client's redirect policy. Go's client copies every
// header of the first request onto each redirect and strips only Authorization,
// WWW-Authenticate and cookies when the host changes; staticPodURLHeader often
// carries credentials under other names, so its keys are removed from a redirect
// to another origin (scheme, host or port) than the first request's.
func dropHeaderOffOrigin(header http.Header) func(*http.Request, []*http.Request) error {
	return func(req *http.Request, via []*http.Request) error {
		if len(via) >= maxHTTPRedirects {
			return fmt.Errorf("stopped after %d redirects", maxHTTPRedirects)
		}
		if !sameOrigin(req.URL, via[0].URL) {
			for k := range header {
				req.Header.Del(k)
			}
		}
		return nil
	}
}

// sameOrigin compares scheme, host and port (a default port written or not).
func sameOrigin(a, b *url.URL) bool {
	return strings.EqualFold(a.Scheme, b.Scheme) && strings.EqualFold(a.Hostname(), b.Hostname()) && originPort(a) == originPort(b)
}

func originPort(u *url.URL) string {
	if p := u.Port(); p != "" {
		return p
	}
	if strings.EqualFold(u.Scheme, "https") {
		return "443"
	}
	return "80"
}

// httpSource is the HTTP source's state between checks (owned by its goroutine).
type httpSource struct {
	url    string
	header http.Header
	client *http.Client
	// last is the last body handled, to skip an unchanged one.
	last     []byte
	failures int
}

func (c *Config) checkHTTPSource(ctx context.Context, s *httpSource) {
	logger := klog.FromContext(ctx)
	err := c.readHTTPSource(ctx, s)
	switch {
	case err == nil:
		if s.failures > 0 {
			logger.Info("Read static pods from URL again", "url", s.url, "failures", s.failures)
		}
		s.failures = 0
		return
	case ctx.Err() != nil:
		return
	case s.failures < httpFailureLogs:
		logger.Error(err, "Unable to read static pods from URL; keeping the pods read before", "url", s.url)
	case s.failures == httpFailureLogs:
		logger.Error(err, "Unable to read static pods from URL; keeping the pods read before; further failures are logged at V(4)", "url", s.url)
	default:
		logger.V(4).Info("Unable to read static pods from URL; keeping the pods read before", "url", s.url, "err", err)
	}
	s.failures++
}

// errEmptyBody is an empty 200 response: no pods, but worth a log line.
var errEmptyBody = errors.New("the response body is empty: the URL source has no pods")

// readHTTPSource makes one GET and sends what changed.
func (c *Config) readHTTPSource(ctx context.Context, s *httpSource) error {
	data, err := s.fetch(ctx)
	if err != nil {
		return err
	}
	if len(data) == 0 {
		// As upstream: an empty body empties the source (and makes it ready). Unlike
		// upstream, the previous body is forgotten, so serving it again brings its
		// pods back.
		s.last = nil
		c.adoptStatic(ctx, podutil.SourceHTTP, nil)
		c.setSnapshot(podutil.SourceHTTP, nil)
		return fmt.Errorf("GET %s: %w", s.url, errEmptyBody)
	}
	if s.last != nil && bytes.Equal(data, s.last) {
		return nil
	}
	// Remembered before decoding, as upstream: a body that does not decode is not
	// decoded again until it changes (the error is logged once per change).
	s.last = data
	pods, err := decodeManifestFrom(data, origin{source: podutil.SourceHTTP, id: "url:" + s.url}, c.nodeName)
	if err != nil {
		return fmt.Errorf("decoding the static pods from %s: %w", s.url, err)
	}
	pods = uniqueByName(ctx, pods, s.url)
	c.adoptStatic(ctx, podutil.SourceHTTP, pods)
	c.setSnapshot(podutil.SourceHTTP, pods)
	return nil
}

// fetch GETs the URL and returns the body of a 200 response.
func (s *httpSource) fetch(ctx context.Context) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.url, nil)
	if err != nil {
		return nil, fmt.Errorf("building the request for staticPodURL %q: %w", s.url, err)
	}
	req.Header = s.header.Clone()
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("GET staticPodURL: %w", err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxManifestSize+1))
	if err != nil {
		return nil, fmt.Errorf("reading the response of GET %s: %w", s.url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", s.url, resp.Status)
	}
	if len(data) > maxManifestSize {
		return nil, fmt.Errorf("GET %s: the response is larger than the static pod manifest limit of %d bytes", s.url, maxManifestSize)
	}
	return data, nil
}

// uniqueByName drops the second and later pods of one full name, as upstream drops
// pods of a source that repeat a name.
func uniqueByName(ctx context.Context, pods []*v1.Pod, where string) []*v1.Pod {
	seen := make(map[string]bool, len(pods))
	out := pods[:0]
	for _, p := range pods {
		if seen[fullName(p)] {
			klog.FromContext(ctx).Error(nil, "Skipping static pod: a pod with the same name is already defined", "url", where, "pod", klog.KObj(p))
			continue
		}
		seen[fullName(p)] = true
		out = append(out, p)
	}
	return out
}
