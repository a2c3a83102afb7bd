package server

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
	"k8s.io/component-base/logs"
	"k8s.io/klog/v2"
)

// debugServer is a server with every debugging handler on, /logs/ serving dir, and
// authz deciding; cfg may turn handlers off.
func debugServer(dir string, authz Authorizer, cfg func(*Config)) *Server {
	c := Config{NodeName: "node-1", EnableDebuggingHandlers: true, EnableProfilingHandler: true,
		EnableDebugFlagsHandler: true, EnableSystemLogHandler: true, SystemLogDir: dir}
	if cfg != nil {
		cfg(&c)
	}
	return New(c, Deps{Authenticator: &UnionAuthenticator{Anonymous: true}, Authorizer: authz})
}

// recordingAuthz allows only the subresource grant (with any verb) and records each
// question as "verb subresource".
type recordingAuthz struct {
	grant string
	mu    sync.Mutex
	asked []string
}

func (a *recordingAuthz) Authorize(_ context.Context, attrs Attributes) (bool, string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.asked = append(a.asked, attrs.Verb+" "+attrs.Resource+"/"+attrs.Subresource)
	return attrs.Subresource == a.grant, "", nil
}

func do(h http.Handler, method, target, body string) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(method, target, strings.NewReader(body)))
	return w
}

// currentVerbosity is the highest klog level enabled (klog has no getter).
func currentVerbosity() int {
	v := 0
	for klog.V(klog.Level(v + 1)).Enabled() {
		v++
	}
	return v
}

// keepVerbosity restores klog's verbosity after a test that changes it.
func keepVerbosity(t *testing.T) {
	prev := currentVerbosity()
	t.Cleanup(func() {
		if _, err := logs.GlogSetter(strconv.Itoa(prev)); err != nil {
			t.Errorf("restoring the verbosity: %v", err)
		}
	})
}

func logDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "syslog"), []byte("node log line\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestDebugHandlersAuthorization: each debugging endpoint is served to a caller
// holding exactly upstream's subresource (nodes/proxy for /debug/*, nodes/log for
// /logs/), asked with the request's verb, and refused with 403 to a caller holding
// every other one.
func TestDebugHandlersAuthorization(t *testing.T) {
	keepVerbosity(t)
	dir := logDir(t)
	others := []string{"proxy", "log", "metrics", "stats", "pods", "healthz", "configz", "spec", "checkpoint"}
	tests := []struct {
		method, target, body string
		sub, verb            string
		want                 string // in the body when served
	}{
		{"GET", "/debug/pprof/", "", "proxy", "get", "Types of profiles available"},
		{"GET", "/debug/pprof/cmdline", "", "proxy", "get", ""},
		{"GET", "/debug/pprof/symbol", "", "proxy", "get", "num_symbols"},
		{"GET", "/debug/pprof/profile?seconds=1", "", "proxy", "get", ""},
		{"GET", "/debug/pprof/trace?seconds=0.05", "", "proxy", "get", ""},
		{"GET", "/debug/pprof/heap", "", "proxy", "get", ""},
		{"GET", "/debug/pprof/goroutine?debug=1", "", "proxy", "get", "goroutine profile:"},
		{"PUT", "/debug/flags/v", strconv.Itoa(currentVerbosity()), "proxy", "update", "successfully set"},
		{"GET", "/logs/", "", "log", "get", `<a href="syslog">syslog</a>`},
		{"GET", "/logs/syslog", "", "log", "get", "node log line"},
	}
	for _, tc := range tests {
		t.Run(tc.method+" "+tc.target, func(t *testing.T) {
			allowed := &recordingAuthz{grant: tc.sub}
			w := do(debugServer(dir, allowed, nil).Handler(), tc.method, tc.target, tc.body)
			if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), tc.want) {
				t.Errorf("with nodes/%s: %d %.200q, want 200 holding %q", tc.sub, w.Code, w.Body.String(), tc.want)
			}
			if want := []string{tc.verb + " nodes/" + tc.sub}; !slices.Equal(allowed.asked, want) {
				t.Errorf("asked %v, want %v", allowed.asked, want)
			}
			for _, other := range others {
				if other == tc.sub {
					continue
				}
				w := do(debugServer(dir, &recordingAuthz{grant: other}, nil).Handler(), tc.method, tc.target, tc.body)
				if w.Code != http.StatusForbidden {
					t.Errorf("with only nodes/%s: %d, want 403", other, w.Code)
				}
			}
		})
	}
}

// TestDebugHandlersDisabled: a handler whose field is false is not served (404, the
// others still are); with enableDebuggingHandlers false none is (as upstream, they
// are debugging handlers); the read-only port never serves any.
func TestDebugHandlersDisabled(t *testing.T) {
	dir := logDir(t)
	paths := map[string]string{"profiling": "/debug/pprof/heap", "flags": "/debug/flags/v", "logs": "/logs/syslog"}
	off := map[string]func(*Config){
		"profiling": func(c *Config) { c.EnableProfilingHandler = false },
		"flags":     func(c *Config) { c.EnableDebugFlagsHandler = false },
		"logs":      func(c *Config) { c.EnableSystemLogHandler = false },
		"debugging": func(c *Config) { c.EnableDebuggingHandlers = false },
	}
	// Upstream's words for an endpoint switched off: 405 with this message.
	disabled := map[string]string{"profiling": "profiling endpoint is disabled.", "flags": "flags endpoint is disabled.", "logs": "logs endpoint is disabled."}
	for name, cfg := range off {
		h := debugServer(dir, AlwaysAllow{}, cfg).Handler()
		for what, p := range paths {
			w := do(h, "GET", p, "")
			switch {
			case name == "debugging":
				if w.Code != http.StatusNotFound {
					t.Errorf("%s off: GET %s = %d, want 404", name, p, w.Code)
				}
			case name == what:
				if w.Code != http.StatusMethodNotAllowed || strings.TrimSpace(w.Body.String()) != disabled[what] {
					t.Errorf("%s off: GET %s = %d %q, want 405 %q", name, p, w.Code, w.Body.String(), disabled[what])
				}
			case strings.Contains(w.Body.String(), "endpoint is disabled"):
				t.Errorf("%s off: GET %s = %d %q, want it served", name, p, w.Code, w.Body.String())
			}
		}
	}
	// Switched off, the endpoints still need their own authorization (nodes/proxy, nodes/log).
	none := debugServer(dir, &recordingAuthz{grant: "stats"}, func(c *Config) {
		c.EnableProfilingHandler, c.EnableDebugFlagsHandler, c.EnableSystemLogHandler = false, false, false
	}).Handler()
	for _, p := range paths {
		if w := do(none, "GET", p, ""); w.Code != http.StatusForbidden {
			t.Errorf("disabled %s without authorization: %d, want 403", p, w.Code)
		}
	}
	ro := debugServer(dir, AlwaysAllow{}, nil).ReadOnlyHandler()
	for _, p := range []string{"/debug/pprof/", "/debug/pprof/heap", "/debug/flags/v", "/logs/", "/logs/syslog"} {
		for _, m := range []string{"GET", "PUT"} {
			if w := do(ro, m, p, "9"); w.Code != http.StatusNotFound {
				t.Errorf("read-only port: %s %s = %d, want 404", m, p, w.Code)
			}
		}
	}
}

// TestDebugFlagsSetsVerbosity: PUT /debug/flags/v sets klog's verbosity; a body that
// is not a non-negative integer is a 400 saying so, and changes nothing; any other
// method is 405.
func TestDebugFlagsSetsVerbosity(t *testing.T) {
	keepVerbosity(t)
	h := debugServer(t.TempDir(), AlwaysAllow{}, nil).Handler()
	want := currentVerbosity() + 3
	if w := do(h, "PUT", "/debug/flags/v", strconv.Itoa(want)+"\n"); w.Code != http.StatusOK {
		t.Fatalf("PUT %d: %d %s", want, w.Code, w.Body)
	}
	if got := currentVerbosity(); got != want {
		t.Fatalf("verbosity %d after PUT %d", got, want)
	}
	for _, body := range []string{"", "abc", "-1", "2.5", "99999999999", strings.Repeat("1", 2000)} {
		w := do(h, "PUT", "/debug/flags/v", body)
		if w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), "non-negative integer") {
			t.Errorf("PUT %.20q: %d %q, want 400 saying what the body must be", body, w.Code, w.Body.String())
		}
	}
	if got := currentVerbosity(); got != want {
		t.Errorf("verbosity %d after bad bodies, want %d unchanged", got, want)
	}
	for _, m := range []string{"GET", "POST"} {
		if w := do(h, m, "/debug/flags/v", "1"); w.Code != http.StatusMethodNotAllowed {
			t.Errorf("%s /debug/flags/v: %d, want 405", m, w.Code)
		}
	}
}

// TestPprofHeapReturnsProfile: /debug/pprof/heap is a gzipped protobuf profile.
func TestPprofHeapReturnsProfile(t *testing.T) {
	w := do(debugServer(t.TempDir(), AlwaysAllow{}, nil).Handler(), "GET", "/debug/pprof/heap", "")
	if w.Code != http.StatusOK {
		t.Fatalf("heap: %d %s", w.Code, w.Body)
	}
	zr, err := gzip.NewReader(bytes.NewReader(w.Body.Bytes()))
	if err != nil {
		t.Fatalf("the heap profile is not gzipped: %v", err)
	}
	data, err := io.ReadAll(zr)
	if err != nil || len(data) == 0 {
		t.Fatalf("reading the heap profile: %d bytes, %v", len(data), err)
	}
	// A profile.proto holds the sample type names in its string table.
	if !bytes.Contains(data, []byte("inuse_space")) {
		t.Error("the heap profile has no inuse_space sample type")
	}
	if w := do(debugServer(t.TempDir(), AlwaysAllow{}, nil).Handler(), "GET", "/debug/pprof/no-such-profile", ""); w.Code != http.StatusNotFound {
		t.Errorf("an unknown profile: %d, want 404", w.Code)
	}
}

// TestContentionProfiling: enableContentionProfiling records blocking events, so
// /debug/pprof/block has samples.
func TestContentionProfiling(t *testing.T) {
	t.Cleanup(func() { runtime.SetBlockProfileRate(0) })
	h := debugServer(t.TempDir(), AlwaysAllow{}, func(c *Config) { c.EnableContentionProfiling = true }).Handler()
	ch := make(chan struct{})
	go func() { time.Sleep(20 * time.Millisecond); close(ch) }()
	<-ch // a blocking receive: recorded at rate 1
	w := do(h, "GET", "/debug/pprof/block?debug=1", "")
	if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), "TestContentionProfiling") {
		t.Errorf("block profile: %d, want a sample from this test:\n%.2000s", w.Code, w.Body.String())
	}
}

// TestSystemLogsRefusesEscapes: /logs/ serves files and listings under its directory
// only. "..", encoded or not, absolute paths, and symlinks leading out (to a file or
// a directory) are refused without reading what lies outside; a FIFO does not hang
// the request; a relative symlink that stays inside is served.
func TestSystemLogsRefusesEscapes(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "log")
	outside := filepath.Join(base, "etc")
	for _, d := range []string{filepath.Join(dir, "sub"), outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	const secret = "root:SECRET-HASH"
	files := map[string]string{
		filepath.Join(dir, "syslog"):          "node log line\n",
		filepath.Join(dir, "sub", "kern.log"): "kernel line\n",
		filepath.Join(outside, "shadow"):      secret + "\n",
		filepath.Join(outside, "passwd"):      secret + "\n",
		filepath.Join(base, "secret"):         secret + "\n",
	}
	for p, data := range files {
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	links := map[string]string{
		"shadow":          filepath.Join(outside, "shadow"), // absolute, out
		"etc":             outside,                          // a directory, out
		"up":              "../secret",                      // relative, out
		"sub/deep":        "../../etc/passwd",               // relative from below, out
		"current":         "syslog",                         // relative, inside: served
		"sub/back-to-log": "../syslog",                      // relative, inside: served
	}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	h := debugServer(dir, AlwaysAllow{}, nil).Handler()

	for _, target := range []string{
		"/logs/../../etc/shadow", "/logs/../secret", "/logs/%2e%2e/%2e%2e/etc/passwd", "/logs/%2E%2E/secret",
		"/logs/..%2Fsecret", "/logs/%2e%2e%2f%2e%2e%2fetc%2fpasswd", "/logs/sub/../../secret", "/logs/sub/%2e%2e/%2e%2e/secret",
		"/logs//etc/passwd", "/logs/%2Fetc%2Fpasswd", "/logs/%2F" + strings.TrimPrefix(outside, "/") + "/passwd", "/logs/..\\secret",
		"/logs/shadow", "/logs/etc/passwd", "/logs/etc/", "/logs/up", "/logs/sub/deep", "/logs/fifo", "/logs/syslog%00",
	} {
		r, ok := rawRequest("GET", target)
		if !ok {
			continue // the HTTP server refuses it before any handler
		}
		done := make(chan *httptest.ResponseRecorder, 1)
		go func() {
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			done <- w
		}()
		select {
		case w := <-done:
			t.Logf("GET %s: %d", target, w.Code)
			if w.Code == http.StatusOK || strings.Contains(w.Body.String(), "SECRET") {
				t.Errorf("GET %s: %d %q, want it refused", target, w.Code, w.Body.String())
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("GET %s hangs", target)
		}
	}

	// The handler refuses ".." itself, whatever the router did with the path.
	s := debugServer(dir, AlwaysAllow{}, nil)
	for _, p := range []string{"/logs/../secret", "/logs/sub/../../secret", "/logs/./syslog", "/logs//syslog", "/logs/a\x00b"} {
		r := httptest.NewRequest("GET", "/logs/x", nil)
		r.URL.Path = p
		w := httptest.NewRecorder()
		s.systemLogs(w, r)
		if w.Code != http.StatusBadRequest {
			t.Errorf("systemLogs(%q): %d %q, want 400", p, w.Code, w.Body.String())
		}
	}

	for target, want := range map[string]string{
		"/logs/syslog":             "node log line",
		"/logs/current":            "node log line",
		"/logs/sub/kern.log":       "kernel line",
		"/logs/sub/back-to-log":    "node log line",
		"/logs/":                   `<a href="sub/">sub/</a>`,
		"/logs/sub/":               `<a href="kern.log">kern.log</a>`,
		"/logs/%73yslog":           "node log line", // an escaped letter is still the same file
		"/logs/syslog?query=ignor": "node log line",
	} {
		r, _ := rawRequest("GET", target)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), want) {
			t.Errorf("GET %s: %d %q, want 200 holding %q", target, w.Code, w.Body.String(), want)
		}
	}
	// A directory without its slash is redirected relative to itself, as upstream's
	// file server does, so the redirect stays under /logs/.
	if w := do(h, "GET", "/logs/sub", ""); w.Code != http.StatusMovedPermanently || w.Header().Get("Location") != "sub/" {
		t.Errorf("GET /logs/sub: %d Location %q, want 301 to sub/", w.Code, w.Header().Get("Location"))
	}
	// Range requests work: log files are large.
	r := httptest.NewRequest("GET", "/logs/syslog", nil)
	r.Header.Set("Range", "bytes=0-3")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != http.StatusPartialContent || w.Body.String() != "node" {
		t.Errorf("range: %d %q", w.Code, w.Body.String())
	}
	// A missing directory is a 404, not an error that says more.
	if w := do(debugServer(filepath.Join(base, "missing"), AlwaysAllow{}, nil).Handler(), "GET", "/logs/syslog", ""); w.Code != http.StatusNotFound {
		t.Errorf("missing log directory: %d", w.Code)
	}
}

// opensWatch reports, through the returned function, the names in dir that were
// opened for reading or writing since the call (inotify IN_OPEN). Descriptors
// opened with O_PATH, which can only be stat'ed, make no such event: that is how
// a test tells "refused after fstat" from "opened, then refused".
func opensWatch(t *testing.T, dir string) func() []string {
	t.Helper()
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if _, err := unix.InotifyAddWatch(fd, dir, unix.IN_OPEN); err != nil {
		t.Fatal(err)
	}
	return func() []string {
		var names []string
		buf := make([]byte, 64<<10)
		for {
			n, err := unix.Read(fd, buf)
			if err != nil || n <= 0 {
				return names
			}
			for off := 0; off+unix.SizeofInotifyEvent <= n; {
				ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
				name := buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+int(ev.Len)]
				if nm := string(bytes.TrimRight(name, "\x00")); nm != "" { // "": the directory itself
					names = append(names, nm)
				}
				off += unix.SizeofInotifyEvent + int(ev.Len)
			}
		}
	}
}

// TestSystemLogsNeverOpensFIFOsOrDevices: /logs/ and the log query's file
// fallback refuse a FIFO, a character device (/dev/null's numbers) and a link
// inside the log directory to either, without ever opening them for reading.
func TestSystemLogsNeverOpensFIFOsOrDevices(t *testing.T) {
	dir := logDir(t)
	if err := unix.Mkfifo(filepath.Join(dir, "fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mknod(filepath.Join(dir, "null"), unix.S_IFCHR|0o600, int(unix.Mkdev(1, 3))); err != nil {
		t.Skipf("cannot make a device node (not root?): %v", err)
	}
	for name, target := range map[string]string{"fifolink": "fifo", "nulllink": "null"} {
		if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	journalctl, _ := fakeJournalctl(t)
	h := debugServer(dir, AlwaysAllow{}, func(c *Config) {
		c.EnableSystemLogQuery = true
		c.JournalctlPath = journalctl
	}).Handler()
	opened := opensWatch(t, dir)

	serve := func(target string) *httptest.ResponseRecorder {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		done := make(chan *httptest.ResponseRecorder, 1)
		go func() { done <- do(h, "GET", target, "") }()
		select {
		case w := <-done:
			return w
		case <-ctx.Done():
			t.Fatalf("GET %s hangs", target)
			return nil
		}
	}
	for _, target := range []string{"/logs/fifo", "/logs/null", "/logs/fifolink", "/logs/nulllink", "/logs/?query=/null"} {
		if w := serve(target); w.Code != http.StatusForbidden {
			t.Errorf("GET %s: %d %q, want 403", target, w.Code, w.Body.String())
		}
	}
	for _, svc := range []string{"fifo", "null"} {
		if w := serve("/logs/?query=" + svc); !strings.Contains(w.Body.String(), "error getting log for "+svc) {
			t.Errorf("query=%s: %d %q, want it refused", svc, w.Code, w.Body.String())
		}
	}
	if got := opened(); len(got) != 0 {
		t.Errorf("opened for reading: %q, want nothing", got)
	}
	// The watch sees real opens: the same handler reading syslog is one.
	if w := serve("/logs/syslog"); w.Code != http.StatusOK || !slices.Contains(opened(), "syslog") {
		t.Fatalf("GET /logs/syslog: %d, and no open seen: the watch proves nothing", w.Code)
	}
}
