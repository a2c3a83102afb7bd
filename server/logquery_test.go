package server

import (
	"bufio"
	"compress/gzip"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// fakeJournalctl writes a journalctl that knows the units nodelet and containerd,
// prints its arguments one a line, and leaves a mark in ran each time it runs.
func fakeJournalctl(t *testing.T) (path, ran string) {
	t.Helper()
	dir := t.TempDir()
	path, ran = filepath.Join(dir, "journalctl"), filepath.Join(dir, "ran")
	script := `#!/bin/sh
echo x >> '` + ran + `'
if [ "$1" = "--field" ]; then printf 'nodelet.service\ncontainerd.service\n'; exit 0; fi
for a in "$@"; do printf '%s\n' "$a"; done
`
	if err := os.WriteFile(path, []byte(script), 0o700); err != nil {
		t.Fatal(err)
	}
	return path, ran
}

func lines(ls ...string) string { return strings.Join(ls, "\n") + "\n" }

// TestSystemLogQuery: with enableSystemLogQuery, /logs/?query= runs journalctl (a
// fake here) with upstream's arguments, each value one argv element, for services
// the journal knows; falls back to <svc>, <svc>.log, <svc>/<svc>.log under the log
// directory (never through a symlink out of it); serves ?query=/<file> as /logs/
// does; and refuses what upstream refuses (400 unparsable, 406 invalid) without
// running anything. Off, the query parameters are ignored and nothing runs.
func TestSystemLogQuery(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "log")
	if err := os.MkdirAll(filepath.Join(dir, "foo"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string]string{
		filepath.Join(dir, "syslog"):         "node log line\n",
		filepath.Join(dir, "kern.log"):       "kernel line\n",
		filepath.Join(dir, "foo", "foo.log"): "foo line\n",
		filepath.Join(base, "secret"):        "SECRET\n",
	} {
		if err := os.WriteFile(name, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Join(base, "secret"), filepath.Join(dir, "evil.log")); err != nil {
		t.Fatal(err)
	}
	journalctl, ran := fakeJournalctl(t)
	marker := filepath.Join(base, "injected")
	h := debugServer(dir, AlwaysAllow{}, func(c *Config) {
		c.EnableSystemLogQuery = true
		c.JournalctlPath = journalctl
	}).Handler()
	base3 := []string{"--utc", "--no-pager", "--output=short-precise"}

	served := []struct{ target, want string }{
		{"/logs/?query=nodelet", lines(append(base3, "--unit=nodelet")...)},
		{"/logs/?query=nodelet&query=containerd&sinceTime=2026-01-02T03:04:05%2B02:00&untilTime=2026-01-03T00:00:00Z" +
			"&tailLines=10&pattern=err.*x&boot=-1",
			lines(append(base3, "--since=2026-01-02 01:04:05", "--until=2026-01-03 00:00:00", "--pager-end", "--lines=10",
				"--unit=nodelet", "--unit=containerd", "--grep=err.*x", "--boot", "-1")...)},
		// Shell syntax is a literal argument: nothing runs it.
		{"/logs/?query=nodelet&pattern=a%24(touch%20" + strings.ReplaceAll(marker, "/", "%2F") + ")",
			lines(append(base3, "--unit=nodelet", "--grep=a$(touch "+marker+")")...)},
		{"/logs/?query=kern", "kernel line\n"},
		{"/logs/?query=foo", "foo line\n"},
		{"/logs/?query=nosuch", "\nlog not found for nosuch\n"},
		{"/logs/?query=evil", "\nerror getting log for evil: open evil.log: permission denied\n"},
		{"/logs/?query=/syslog", "node log line\n"},
		{"/logs/?query=foo/foo.log", "foo line\n"},
		{"/logs/?query=kern&tailLines=3", "\noptions present and query resolved to log files for [kern]\ntry without specifying options\n"},
	}
	for _, tc := range served {
		w := do(h, "GET", tc.target, "")
		if w.Code != http.StatusOK || w.Body.String() != tc.want {
			t.Errorf("GET %s: %d\n%s\nwant 200\n%s", tc.target, w.Code, w.Body.String(), tc.want)
		}
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("a pattern's shell syntax ran")
	}

	r := httptest.NewRequest("GET", "/logs/?query=containerd", nil)
	r.Header.Set("Accept-Encoding", "gzip")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	zr, err := gzip.NewReader(w.Body)
	if err != nil {
		t.Fatalf("gzip: %v", err)
	}
	if got, _ := io.ReadAll(zr); string(got) != lines(append(base3, "--unit=containerd")...) {
		t.Errorf("gzipped query: %q", got)
	}

	if err := os.Remove(ran); err != nil {
		t.Fatal(err)
	}
	refused := []struct {
		target string
		code   int
	}{
		{"/logs/?query=%20%20", http.StatusBadRequest},
		{"/logs/?query=x&tailLines=abc", http.StatusBadRequest},
		{"/logs/?query=x&boot=z", http.StatusBadRequest},
		{"/logs/?query=x&sinceTime=yesterday", http.StatusBadRequest},
		{"/logs/syslog?query=nodelet", http.StatusNotAcceptable},
		{"/logs/?query=a%3Brm", http.StatusNotAcceptable},
		{"/logs/?query=%24(id)", http.StatusNotAcceptable},
		{"/logs/?query=..", http.StatusNotAcceptable},
		{"/logs/?query=" + strings.Repeat("a", 257), http.StatusNotAcceptable},
		{"/logs/?query=a&query=b&query=c&query=d&query=e", http.StatusNotAcceptable},
		{"/logs/?query=nodelet&query=/syslog", http.StatusNotAcceptable},
		{"/logs/?query=/syslog&query=/kern.log", http.StatusNotAcceptable},
		{"/logs/?query=/syslog&tailLines=1", http.StatusNotAcceptable},
		{"/logs/?query=x&tailLines=100001", http.StatusNotAcceptable},
		{"/logs/?query=x&tailLines=-1", http.StatusNotAcceptable},
		{"/logs/?query=x&boot=1", http.StatusNotAcceptable},
		{"/logs/?query=x&pattern=(", http.StatusNotAcceptable},
		{"/logs/?query=x&sinceTime=2026-01-02T00:00:00Z&untilTime=2026-01-01T00:00:00Z", http.StatusNotAcceptable},
		{"/logs/?tailLines=5", http.StatusNotAcceptable},
		{"/logs/?query=/../secret", http.StatusBadRequest},
		{"/logs/?query=/%2e%2e/secret", http.StatusBadRequest},
		{"/logs/?query=/evil.log", http.StatusForbidden},
	}
	for _, tc := range refused {
		w := do(h, "GET", tc.target, "")
		if w.Code != tc.code || strings.Contains(w.Body.String(), "SECRET") {
			t.Errorf("GET %s: %d %q, want %d", tc.target, w.Code, w.Body.String(), tc.code)
		}
	}
	if _, err := os.Stat(ran); err == nil {
		t.Error("journalctl ran for a refused query")
	}

	// Off (the default): the parameters are ignored, as upstream; /logs/ lists.
	off := debugServer(dir, AlwaysAllow{}, func(c *Config) { c.JournalctlPath = journalctl }).Handler()
	if w := do(off, "GET", "/logs/?query=nodelet", ""); w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `<a href="syslog">`) {
		t.Errorf("query off: %d %q, want the listing", w.Code, w.Body.String())
	}
	if _, err := os.Stat(ran); err == nil {
		t.Error("journalctl ran with the query off")
	}
}

// TestSystemLogQueryConcurrencyCap: at most maxConcurrentLogQueries service
// queries run journalctl at once; one more is answered 429 at once (not queued),
// and a slot is free again when a query ends.
func TestSystemLogQueryConcurrencyCap(t *testing.T) {
	dir := t.TempDir()
	block, started := filepath.Join(dir, "block"), filepath.Join(dir, "started")
	if err := unix.Mkfifo(started, 0o600); err != nil {
		t.Fatal(err)
	}
	// Read and write: the scripts' writes never wait for a reader.
	fifo, err := os.OpenFile(started, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer fifo.Close()
	journalctl := filepath.Join(dir, "journalctl")
	script := `#!/bin/sh
if [ -e '` + block + `' ]; then echo x > '` + started + `'; exec sleep 600; fi
if [ "$1" = "--field" ]; then printf 'nodelet.service\n'; exit 0; fi
echo served
`
	if err := os.WriteFile(journalctl, []byte(script), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(block, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	h := debugServer(dir, AlwaysAllow{}, func(c *Config) {
		c.EnableSystemLogQuery = true
		c.JournalctlPath = journalctl
	}).Handler()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	query := func(ctx context.Context) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", "/logs/?query=nodelet", nil).WithContext(ctx))
		return w
	}

	var wg sync.WaitGroup
	for i := 0; i < maxConcurrentLogQueries; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); query(ctx) }()
	}
	r := bufio.NewReader(fifo)
	for i := 0; i < maxConcurrentLogQueries; i++ {
		if _, err := r.ReadString('\n'); err != nil {
			t.Fatal(err)
		}
	}
	// Every slot holds a running journalctl: the next query is refused at once.
	extraCtx, extraCancel := context.WithTimeout(ctx, 20*time.Second)
	defer extraCancel()
	done := make(chan *httptest.ResponseRecorder, 1)
	go func() { done <- query(extraCtx) }()
	select {
	case w := <-done:
		if w.Code != http.StatusTooManyRequests || !strings.Contains(w.Body.String(), "too many node log queries") {
			t.Errorf("query %d: %d %q, want 429", maxConcurrentLogQueries+1, w.Code, w.Body.String())
		}
	case <-extraCtx.Done():
		t.Errorf("query %d ran journalctl beside the %d others instead of being refused", maxConcurrentLogQueries+1, maxConcurrentLogQueries)
		<-done
	}

	cancel() // ends the running queries (their journalctl is killed)
	wg.Wait()
	if err := os.Remove(block); err != nil {
		t.Fatal(err)
	}
	if w := query(context.Background()); w.Code != http.StatusOK || w.Body.String() != "served\n" {
		t.Errorf("after the others ended: %d %q, want 200 served", w.Code, w.Body.String())
	}
}
