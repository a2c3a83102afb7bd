package server

import (
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os/exec"
	"regexp"
	"regexp/syntax"
	"strconv"
	"strings"
	"time"

	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/internal/ctxio"
)

// Upstream's limits on a node log query.
const (
	maxLogQueryTailLines  = 100000
	maxLogQueryServices   = 4
	maxLogQueryServiceLen = 256
	// logQueryTimeout bounds the journalctl runs of one query.
	logQueryTimeout = 30 * time.Second
	// journalDateLayout is how --since/--until are given to journalctl (with --utc).
	journalDateLayout = "2006-01-02 15:04:05"
	// maxConcurrentLogQueries caps the service queries running at once (each runs
	// journalctl, at most one at a time; a pattern can keep it on a CPU for the whole
	// timeout). Upstream has no cap, so a nodes/log holder could start one per
	// request. Four lets a few operators query at once while a flood holds at most
	// four processes (two cores on the smallest nodes) for 30 s each; the excess
	// gets 429 at once rather than queueing behind them.
	maxConcurrentLogQueries = 4
)

// unsafeServiceName matches any character journalctl is never given in a unit name
// (upstream's allow-list): the name becomes one argv element, but no character
// that could start a new option or a glob is let through either.
var unsafeServiceName = regexp.MustCompile(`[^a-zA-Z0-9\-_.:@]`)

// nodeLogQuery is a /logs/?query=... request (enableSystemLogQuery, upstream's
// NodeLogQuery): the journal of up to four services, or one file under the log
// directory.
type nodeLogQuery struct {
	services []string
	files    []string
	logQueryOptions
}

// logQueryOptions apply to service (journal) queries only, as upstream.
type logQueryOptions struct {
	since, until *time.Time
	tailLines    *int
	boot         *int
	pattern      string
}

func (o logQueryOptions) set() bool {
	return o.since != nil || o.until != nil || o.tailLines != nil || o.boot != nil || o.pattern != ""
}

// parseNodeLogQuery reads the query parameters; nil (and no error) when the request
// has none of them, so it is a plain file or listing request.
func parseNodeLogQuery(q url.Values) (*nodeLogQuery, error) {
	var n nodeLogQuery
	var errs []error
	queries, hasQuery := q["query"]
	for _, v := range queries {
		// A slash says a file, as upstream; anything else is a service.
		if strings.ContainsAny(v, `/\`) {
			n.files = append(n.files, v)
		} else if strings.TrimSpace(v) != "" {
			n.services = append(n.services, v)
		}
	}
	if hasQuery && len(n.files) == 0 && len(n.services) == 0 {
		errs = append(errs, errors.New("query: may not be empty"))
	}
	parseTime := func(name string) *time.Time {
		v := q.Get(name)
		if v == "" {
			return nil
		}
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %q is not an RFC 3339 time", name, v))
			return nil
		}
		return &t
	}
	parseInt := func(name string) *int {
		v := q.Get(name)
		if v == "" {
			return nil
		}
		i, err := strconv.Atoi(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %q is not an integer", name, v))
			return nil
		}
		return &i
	}
	n.since, n.until = parseTime("sinceTime"), parseTime("untilTime")
	n.boot, n.tailLines = parseInt("boot"), parseInt("tailLines")
	n.pattern = q.Get("pattern")
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if !hasQuery && !n.set() {
		return nil, nil
	}
	return &n, nil
}

// validate checks the query as upstream does before anything runs.
func (n *nodeLogQuery) validate() error {
	var errs []error
	for _, s := range n.services {
		if len(s) > maxLogQueryServiceLen {
			errs = append(errs, fmt.Errorf("query: service name %.40q... is longer than %d", s, maxLogQueryServiceLen))
		} else if unsafeServiceName.MatchString(s) || s == "." || s == ".." {
			errs = append(errs, fmt.Errorf("query: service name %q holds characters other than letters, digits and -_.:@ (or is . or ..)", s))
		}
	}
	if len(n.services) > maxLogQueryServices {
		errs = append(errs, fmt.Errorf("query: %d services, at most %d", len(n.services), maxLogQueryServices))
	}
	switch {
	case len(n.files) == 0 && len(n.services) == 0:
		errs = append(errs, errors.New("query: required with the other options"))
	case len(n.files) > 0 && len(n.services) > 0:
		errs = append(errs, errors.New("query: cannot name a file and a service"))
	case len(n.files) > 1:
		errs = append(errs, errors.New("query: cannot name more than one file"))
	case len(n.files) == 1 && n.set():
		errs = append(errs, errors.New("query: a file takes no other options"))
	}
	if n.since != nil && n.until != nil && n.since.After(*n.until) {
		errs = append(errs, errors.New("untilTime: must be after sinceTime"))
	}
	if n.boot != nil && *n.boot > 0 {
		errs = append(errs, fmt.Errorf("boot: %d, must be 0 or less (0 the current boot, -1 the one before)", *n.boot))
	}
	if n.tailLines != nil && (*n.tailLines < 0 || *n.tailLines > maxLogQueryTailLines) {
		errs = append(errs, fmt.Errorf("tailLines: %d, must be between 0 and %d", *n.tailLines, maxLogQueryTailLines))
	}
	if _, err := syntax.Parse(n.pattern, syntax.Perl); err != nil {
		errs = append(errs, fmt.Errorf("pattern: %w", err))
	}
	return errors.Join(errs...)
}

// journalArgs are journalctl's arguments for the services' logs, each value in an
// argv element of its own: nothing goes through a shell.
func (n *nodeLogQuery) journalArgs(services []string) []string {
	args := []string{"--utc", "--no-pager", "--output=short-precise"}
	// --utc reads --since and --until as UTC too, so the times are converted.
	if n.since != nil {
		args = append(args, "--since="+n.since.UTC().Format(journalDateLayout))
	}
	if n.until != nil {
		args = append(args, "--until="+n.until.UTC().Format(journalDateLayout))
	}
	if n.tailLines != nil {
		args = append(args, "--pager-end", "--lines="+strconv.Itoa(*n.tailLines))
	}
	for _, s := range services {
		args = append(args, "--unit="+s)
	}
	if n.pattern != "" {
		args = append(args, "--grep="+n.pattern)
	}
	if n.boot != nil {
		args = append(args, "--boot", strconv.Itoa(*n.boot))
	}
	return args
}

// serveLogQuery answers a validated service query: the journal of the services
// journald knows, and for the others the first of <svc>, <svc>.log and
// <svc>/<svc>.log under the log directory (upstream's heuristics), opened as
// /logs/ opens files.
func (s *Server) serveLogQuery(w http.ResponseWriter, r *http.Request, n *nodeLogQuery) {
	select {
	case s.logQueries <- struct{}{}:
		defer func() { <-s.logQueries }()
	default:
		w.Header().Set("Retry-After", "5")
		http.Error(w, fmt.Sprintf("too many node log queries are running (at most %d at once); retry later", maxConcurrentLogQueries), http.StatusTooManyRequests)
		return
	}
	w.Header().Set("Content-Type", "text/plain;charset=UTF-8")
	var out io.Writer = w
	if r.Header.Get("Accept-Encoding") == "gzip" {
		w.Header().Set("Content-Encoding", "gzip")
		gz := gzip.NewWriter(w)
		defer func() { _ = gz.Close() }()
		out = gz
	}
	ctx, cancel := context.WithTimeout(r.Context(), logQueryTimeout)
	defer cancel()
	user, _ := r.Context().Value(userKey{}).(*User)
	name := ""
	if user != nil {
		name = user.Name
	}
	klog.V(2).InfoS("Node log query", "user", name, "services", n.services)

	units := s.journalUnits(ctx)
	var journal, files []string
	for _, svc := range n.services {
		if strings.Contains(units, svc+".service") {
			journal = append(journal, svc)
		} else {
			files = append(files, svc)
		}
	}
	if len(journal) > 0 {
		s.copyJournal(ctx, out, n.journalArgs(journal))
	}
	if len(files) == 0 {
		return
	}
	if n.set() {
		_, _ = fmt.Fprintf(out, "\noptions present and query resolved to log files for %v\ntry without specifying options\n", files)
		return
	}
	fsys, err := s.openLogFS()
	if err != nil {
		_, _ = fmt.Fprintf(out, "\nlog not found for %v\n", files)
		return
	}
	for _, svc := range files {
		copyServiceFile(ctx, out, fsys, svc)
	}
}

// journalUnits is `journalctl --field _SYSTEMD_UNIT`: the units journald holds
// logs of. Empty when journalctl fails (no journal: every service is looked for
// in files).
func (s *Server) journalUnits(ctx context.Context) string {
	out, err := exec.CommandContext(ctx, s.cfg.JournalctlPath, "--field", "_SYSTEMD_UNIT").Output()
	if err != nil {
		klog.V(2).InfoS("Listing the journal's units", "err", err)
		return ""
	}
	return string(out)
}

func (s *Server) copyJournal(ctx context.Context, out io.Writer, args []string) {
	cmd := exec.CommandContext(ctx, s.cfg.JournalctlPath, args...)
	cmd.Stdout, cmd.Stderr = out, out
	// A child that keeps the output pipe open must not hold the request past the timeout.
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Run(); err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			// journalctl said why on stderr, which the caller has.
			return
		}
		klog.V(2).InfoS("Running journalctl for a node log query", "err", err)
		_, _ = io.WriteString(out, "\nerror: journal output not available\n")
	}
}

// copyServiceFile copies the first of upstream's candidate files for svc.
func copyServiceFile(ctx context.Context, out io.Writer, fsys logFS, svc string) {
	for _, name := range []string{svc, svc + ".log", svc + "/" + svc + ".log"} {
		f, err := fsys.Open(name)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			_, _ = fmt.Fprintf(out, "\nerror getting log for %s: %v\n", svc, err)
			return
		}
		st, err := f.Stat()
		if err == nil && st.IsDir() {
			// /var/log/<svc>/ is where <svc>/<svc>.log may be.
			_ = f.Close()
			continue
		}
		_, err = io.Copy(out, ctxio.Reader{Ctx: ctx, R: f})
		_ = f.Close()
		if err != nil {
			_, _ = fmt.Fprintf(out, "\nerror getting log for %s: %v\n", svc, err)
		}
		return
	}
	_, _ = fmt.Fprintf(out, "\nlog not found for %s\n", svc)
}
