package server

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/pprof"
	"os"
	"runtime"
	"strings"

	"k8s.io/component-base/logs"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/internal/safepath"
)

// DefaultSystemLogDir is what /logs/ serves upstream: the node's log directory.
const DefaultSystemLogDir = "/var/log"

// maxFlagBody bounds a /debug/flags/v body: a verbosity is a few digits.
const maxFlagBody = 1 << 10

// debugRoutes are upstream's optional debugging endpoints (profiling, the verbosity
// flag, the node's log files), each behind its own KubeletConfiguration field. As
// upstream, they exist only with enableDebuggingHandlers, and only on the
// authenticated port; the caller checks that.
func (s *Server) debugRoutes() []route {
	var rs []route
	add := func(pattern string, h http.Handler) { rs = append(rs, route{pattern: pattern, handler: h}) }
	if s.cfg.EnableProfilingHandler {
		// GET only, as upstream. The index and named profiles (heap, goroutine,
		// block, ...) come from runtime/pprof; the others are handlers of their own.
		add("GET /debug/pprof/{$}", http.HandlerFunc(pprof.Index))
		add("GET /debug/pprof/cmdline", http.HandlerFunc(pprof.Cmdline))
		add("GET /debug/pprof/profile", http.HandlerFunc(pprof.Profile))
		add("GET /debug/pprof/symbol", http.HandlerFunc(pprof.Symbol))
		add("GET /debug/pprof/trace", http.HandlerFunc(pprof.Trace))
		add("GET /debug/pprof/{name}", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			pprof.Handler(r.PathValue("name")).ServeHTTP(w, r)
		}))
	}
	if !s.cfg.EnableProfilingHandler {
		add("/debug/pprof/", disabledEndpoint("profiling endpoint is disabled."))
	}
	if s.cfg.EnableDebugFlagsHandler {
		// Every method reaches the handler, which answers 405 to all but PUT (as
		// upstream), rather than the 404 of a path that does not exist.
		add("/debug/flags/v", http.HandlerFunc(s.setVerbosity))
	} else {
		add("/debug/flags/v", disabledEndpoint("flags endpoint is disabled."))
	}
	if s.cfg.EnableSystemLogHandler {
		add("GET /logs/", http.HandlerFunc(s.systemLogs))
	} else {
		add("/logs/", disabledEndpoint("logs endpoint is disabled."))
	}
	return rs
}

// disabledEndpoint answers a handler switched off in the config as upstream does:
// 405 with its message, so a caller (authorized like for the real handler) learns
// the endpoint exists and is off, not that the path is wrong.
func disabledEndpoint(msg string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, msg, http.StatusMethodNotAllowed)
	})
}

// setVerbosity is PUT /debug/flags/v: the body is klog's new verbosity. It goes
// through component-base's setter, as upstream, so that a logging backend applied
// through component-base (json) follows the new level too.
func (s *Server) setVerbosity(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPut {
		w.Header().Set("Allow", http.MethodPut)
		http.Error(w, "unsupported http method: only PUT sets the verbosity", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxFlagBody+1))
	if err != nil {
		http.Error(w, fmt.Sprintf("reading the request body: %v", err), http.StatusBadRequest)
		return
	}
	if len(body) > maxFlagBody {
		http.Error(w, fmt.Sprintf("the body is longer than %d bytes: it must hold only the verbosity, a non-negative integer", maxFlagBody), http.StatusBadRequest)
		return
	}
	// curl --data-binary @- and echo add a newline; the setter wants digits only.
	val := strings.TrimSpace(string(body))
	msg, err := logs.GlogSetter(val)
	if err != nil {
		http.Error(w, fmt.Sprintf("setting the verbosity to %q: %v (the body must be a non-negative integer)", val, err), http.StatusBadRequest)
		return
	}
	user, _ := r.Context().Value(userKey{}).(*User)
	name := ""
	if user != nil {
		name = user.Name
	}
	klog.InfoS("Log verbosity changed through /debug/flags/v", "verbosity", val, "user", name)
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	_, _ = io.WriteString(w, msg)
}

// systemLogs is GET /logs/: files and directory listings under SystemLogDir, and
// with EnableSystemLogQuery the node log query (?query=, logquery.go). The
// path is hostile: any ".." is refused outright, and files are opened through
// logFS, which resolves every component with openat and refuses symlinks that
// lead out of the directory, so a link in /var/log to /etc/shadow is never read.
func (s *Server) systemLogs(w http.ResponseWriter, r *http.Request) {
	rel := strings.TrimPrefix(r.URL.Path, "/logs/")
	if s.cfg.EnableSystemLogQuery {
		n, err := parseNodeLogQuery(r.URL.Query())
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if n != nil {
			// Upstream's statuses: a query with a path, or an invalid one, is 406.
			if rel != "" {
				http.Error(w, "path not allowed in query mode", http.StatusNotAcceptable)
				return
			}
			if err := n.validate(); err != nil {
				http.Error(w, err.Error(), http.StatusNotAcceptable)
				return
			}
			if len(n.services) > 0 {
				s.serveLogQuery(w, r, n)
				return
			}
			// One file (validate allows no more), served as /logs/<file> would be:
			// "query=/kern.log" names /var/log/kern.log.
			rel = strings.TrimPrefix(n.files[0], "/")
		}
	}
	if !validLogPath(rel) {
		http.Error(w, "the log path must be relative to the log directory, without \"..\" or empty segments", http.StatusBadRequest)
		return
	}
	fsys, err := s.openLogFS()
	if err != nil {
		http.Error(w, "the system log directory is not available", http.StatusNotFound)
		return
	}
	r2 := r.Clone(r.Context())
	r2.URL.Path = "/" + rel
	r2.URL.RawPath = ""
	http.FileServerFS(fsys).ServeHTTP(w, r2)
}

// openLogFS is SystemLogDir for /logs/ and the log query's file fallback, once
// it is known to be a directory (the failure is logged here, so callers only say
// what the client sees).
func (s *Server) openLogFS() (logFS, error) {
	fi, err := os.Stat(s.cfg.SystemLogDir)
	if err == nil && !fi.IsDir() {
		err = fmt.Errorf("%s is not a directory", s.cfg.SystemLogDir)
	}
	if err != nil {
		klog.V(2).InfoS("Opening the system log directory", "dir", s.cfg.SystemLogDir, "err", err)
		return logFS{}, fmt.Errorf("opening the system log directory: %w", err)
	}
	return logFS{dir: s.cfg.SystemLogDir}, nil
}

// validLogPath says whether p (below /logs/, decoded) names something under the log
// directory by a plain relative path. An empty path is the directory itself; a
// trailing "/" asks for a directory listing.
func validLogPath(p string) bool {
	if strings.ContainsAny(p, "\x00\\") || strings.HasPrefix(p, "/") {
		return false
	}
	segs := strings.Split(p, "/")
	for i, seg := range segs {
		if seg == ".." || seg == "." || (seg == "" && i != len(segs)-1) {
			return false
		}
	}
	return true
}

// logFS opens files under one directory and nowhere else: each name is resolved
// by safepath.Open (openat per component, O_PATH; a symlink that is absolute or
// leads out of the directory is refused, one that stays inside is followed, as
// os.Root does), and only what fstat then says is a regular file or a directory
// is opened for reading, by safepath.Reopen. A FIFO (which would hang the
// request) or a device (opening one can act on it, and it is no log) is never
// opened. Any error other than "not found" (an escaping symlink is one) is
// answered as 403, so the server's reply never says what lies outside.
type logFS struct{ dir string }

func (l logFS) Open(name string) (fs.File, error) {
	if !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrInvalid}
	}
	p, err := safepath.Open(l.dir, name)
	if err != nil {
		return nil, refusal(name, err)
	}
	defer p.Close()
	f, err := safepath.Reopen(p, true)
	if err != nil {
		return nil, refusal(name, err)
	}
	return f, nil
}

// refusal keeps "not found" and maps every other failure to permission denied.
func refusal(name string, err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return err
	}
	klog.V(2).InfoS("Refusing a system log path", "path", name, "err", err)
	return &fs.PathError{Op: "open", Path: name, Err: fs.ErrPermission}
}

// enableContentionProfiling records every blocking event in the block profile
// (/debug/pprof/block), as upstream's enableContentionProfiling does. It is the
// process's setting, so it is made once, when the authenticated API is built.
func enableContentionProfiling() {
	runtime.SetBlockProfileRate(1)
}
